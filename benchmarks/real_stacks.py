"""Real training stacks' own entry points after `apply` (and `apply --unsafe`), run on the NPU
emulation: Megatron-LM core_v0.12.1's `pretrain_gpt.py` (the release Ascend's MindSpeed ports), a
tiny GPT with mock data, tensor-parallel size 2 under torchrun, bf16, and none of Megatron's
fusion arguments given (its defaults ask for Transformer Engine, apex's fusions and a CUDA kernel
build at start-up). Its original needs CUDA and cannot run on the CPU, so the verdict is that the
run finishes with finite losses whose last is below its first.

    python benchmarks/real_stacks.py

Megatron-LM comes from a git mirror at a pinned commit (tests/sources.py: `fetch
github:NVIDIA/Megatron-LM`); its dataset helpers build with pybind11 and its tokenizers import
six (the `dev` extra has both). Prints one row per run; always exits 0."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.sources import MEGATRON_LM, checkout

TORCHRUN = [str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc_per_node", "2"]
PRETRAIN_GPT = (
    "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "64",
    "--max-position-embeddings", "64", "--micro-batch-size", "2", "--global-batch-size", "4",
    "--train-iters", "4", "--lr", "1e-4", "--mock-data", "--tokenizer-type", "NullTokenizer",
    "--vocab-size", "128", "--tensor-model-parallel-size", "2", "--bf16", "--log-interval", "1",
    "--eval-iters", "0",
)  # fmt: skip
# Megatron refuses tensor parallelism without it; its launch scripts export it (kept by `apply`)
ENVIRONMENT = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
LOSS = re.compile(r"iteration\s+(\d+)/\s*\d+ .*?lm loss: ([-\d.E+]+)")


def run_megatron(tree: Path, unsafe: bool, work: Path) -> dict[str, object]:
    migrated = work / ("unsafe" if unsafe else "safe")
    apply = [sys.executable, "-m", "npu_migrate", "apply", str(tree), "--out", str(migrated)]
    unsafe_flag = ["--unsafe"] if unsafe else []
    subprocess.run([*apply, "--no-change-list", *unsafe_flag], capture_output=True, text=True, check=False)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "npu_migrate", "run", "--emulate", *TORCHRUN, "pretrain_gpt.py",
         *PRETRAIN_GPT],
        cwd=migrated, env={**os.environ, **ENVIRONMENT}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    losses = [float(loss) for _, loss in LOSS.findall(done.stdout)]
    row: dict[str, object] = {"losses": losses, "seconds": seconds, "rc": done.returncode}
    if done.returncode != 0:
        said = [line for line in (done.stderr + done.stdout).splitlines() if "Error" in line]
        row["error"] = (said[0] if said else done.stderr[-300:])[:200]
    row["passed"] = (
        done.returncode == 0
        and len(losses) >= 4
        and all(math.isfinite(x) for x in losses)
        and losses[-1] < losses[0]
    )
    return row


def main() -> int:
    source = checkout(MEGATRON_LM)
    print(f"{'run':58} {'rc':>3} {'lm loss per iteration':>44} {'s':>6}  verdict")
    with tempfile.TemporaryDirectory(prefix="npu-migrate-stack-") as folder:
        work = Path(folder)
        tree = work / "Megatron-LM"
        shutil.copytree(source, tree)
        for unsafe in (False, True):
            row = run_megatron(tree, unsafe, work)
            name = f"Megatron-LM core_v0.12.1 pretrain_gpt.py, apply{' --unsafe' if unsafe else ''}"
            losses = " ".join(f"{x:.4f}" for x in row["losses"])  # type: ignore[attr-defined]
            verdict = "PASS" if row["passed"] else f"FAIL {row.get('error', '')}"
            print(f"{name:58} {row['rc']:>3} {losses:>44} {row['seconds']:>6.1f}  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
