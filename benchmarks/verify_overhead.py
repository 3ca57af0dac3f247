"""What verify costs on top of the model itself, on the bundled GPT fixture:

- plain forward passes of the original model in this process (the baseline);
- the same forward with verify's module hooks recording every output (its in-process overhead);
- a whole `npu-migrate verify` run (two side processes, emulated migrated side, comparison).

    python benchmarks/verify_overhead.py [--repeat N]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import torch

from npu_migrate.verify.capture import ModuleRecorder

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "verify" / "gpt"


def build() -> dict:
    sys.path.insert(0, str(FIXTURE / "original"))
    spec = importlib.util.spec_from_file_location("entry", FIXTURE / "original" / "entry.py")
    entry = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(entry)
    return entry.build()


def per_call_ms(fn, repeat: int) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) * 1000 / repeat


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    parts = build()
    model, inputs = parts["model"].eval(), parts["inputs"]
    with torch.no_grad():
        plain = per_call_ms(lambda: model(*inputs), args.repeat)
        recorder = ModuleRecorder(model)
        hooked = per_call_ms(lambda: (recorder.rows.clear(), model(*inputs)), args.repeat)
        recorder.close()
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "npu_migrate", "verify", "--original", FIXTURE / "original",
         "--migrated", FIXTURE / "migrated", "--entry", "entry.py:build"],
        capture_output=True, check=True,
    )  # fmt: skip
    whole = time.perf_counter() - start
    print(f"plain forward (baseline)          {plain:8.2f} ms")
    print(f"forward with verify's hooks       {hooked:8.2f} ms  ({hooked / plain:.2f}x)")
    print(f"whole verify run (two processes)  {whole * 1000:8.0f} ms  ({whole * 1000 / plain:.0f} forwards)")


if __name__ == "__main__":
    main()
