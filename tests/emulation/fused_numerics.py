"""Runs every numerical case of test_fused_rules on the emulated NPU and writes, by `case-dtype`,
what went wrong (`error`, None when the rewrite matched the original) and what its run-time guards
said. Run by that module as `npu-migrate run --emulate fused_numerics.py RESULTS.json`: the
emulation changes torch for the whole process, so the cases share one child process."""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.emulation import test_fused_rules as cases


def main(out: Path) -> None:
    sys.modules.update(cases.references())
    results: dict[str, dict] = {}
    runs = [(name, cases.run_case) for name in cases.CASES]
    runs += [(name, cases.run_statements) for name in cases.ATTENTION_MODULES]
    for name, run in runs:
        for dtype in cases.DTYPES:
            key = f"{name}-{cases.dtype_name(dtype)}"
            try:
                results[key] = {"error": None, **run(name, dtype)}
            except Exception:  # what failed, for the test that reads this case
                results[key] = {"error": traceback.format_exc(limit=-3), "guards": {}, "guarded": False}
    out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
