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
    bf16 = [cases.torch.bfloat16]
    runs = [  # (key prefix, case names, how one runs, dtypes)
        ("", cases.CASES, cases.run_case, cases.DTYPES),
        ("", cases.ATTENTION_MODULES, cases.run_statements, cases.DTYPES),
        ("rms-norm-", cases.HF_RMS_NORMS, cases.run_rms_norm, cases.DTYPES),
        ("rms-norm-fp32-weight-", cases.HF_RMS_NORMS, cases.run_rms_norm_fp32_weight, bf16),
    ]
    results: dict[str, dict] = {}
    for prefix, names, run, dtypes in runs:
        for name in names:
            for dtype in dtypes:
                key = f"{prefix}{name}-{cases.dtype_name(dtype)}"
                try:
                    results[key] = {"error": None, **run(name, dtype)}
                except Exception:  # what failed, for the test that reads this case
                    results[key] = {"error": traceback.format_exc(limit=-3), "guards": {}, "guarded": False}
    out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
