"""Real training stacks' own entry points after `apply` (and `apply --unsafe`), run on the NPU
emulation: Megatron-LM core_v0.12.1's `pretrain_gpt.py` (the release Ascend's MindSpeed ports), a
tiny GPT with mock data, tensor-parallel size 2 under torchrun, bf16, and none of Megatron's
fusion arguments given (its defaults ask for Transformer Engine, apex's fusions and a CUDA kernel
build at start-up); and Wan2.1's video DiT (`wan/modules/model.py`, every attention through
flash-attn 3 or 2) trained a few steps by a user's script in CUDA form (benchmarks/stacks). Their
originals need CUDA and cannot run on the CPU, so the verdict is that the run finishes with finite
losses whose last is below its first. Wan's attention is flash-attn's alone: `apply` reports it
and the run stops at Wan's own `assert FLASH_ATTN_2_AVAILABLE`; `--unsafe` rewrites it.

    python benchmarks/real_stacks.py

Megatron-LM and Wan2.1 come from git mirrors at pinned commits (tests/sources.py: `fetch
github:NVIDIA/Megatron-LM`, `fetch github:Wan-Video/Wan2.1`); Megatron's dataset helpers build
with pybind11 and its tokenizers import six (the `dev` extra has both); Wan's model imports
diffusers, whose pinned wheel (tests/sources.py) goes on its path. Prints one row per run; always
exits 0."""

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

from tests.sources import DIFFUSERS, MEGATRON_LM, WAN_2_1, checkout, fetch

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
FRAME = re.compile(r'File "([^"]+)", line (\d+)')
WAN_LOSS = re.compile(r"step (\d+) loss ([-\d.e+]+)")
WAN_ENTRY = Path(__file__).with_name("stacks") / "wan_dit_train.py"


def run_migrated(
    tree: Path, unsafe: bool, work: Path, command: list[str], env: dict[str, str], loss: re.Pattern[str]
) -> dict[str, object]:
    """`apply` (or `apply --unsafe`) `tree` into `work`, then run `command` there on the emulation."""
    migrated = work / f"{tree.name}-{'unsafe' if unsafe else 'safe'}"
    apply = [sys.executable, "-m", "npu_migrate", "apply", str(tree), "--out", str(migrated)]
    unsafe_flag = ["--unsafe"] if unsafe else []
    subprocess.run([*apply, "--no-change-list", *unsafe_flag], capture_output=True, text=True, check=False)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "npu_migrate", "run", "--emulate", *command],
        cwd=migrated, env={**os.environ, **env}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    losses = [float(value) for _, value in loss.findall(done.stdout)]
    row: dict[str, object] = {"losses": losses, "seconds": seconds, "rc": done.returncode}
    if done.returncode != 0:
        said = [line for line in (done.stderr + done.stdout).splitlines() if "Error" in line]
        frames = FRAME.findall(done.stderr)
        where = f" at {Path(frames[-1][0]).name}:{frames[-1][1]}" if frames else ""
        row["error"] = (said[0] if said else done.stderr[-300:])[:200] + where
    row["passed"] = (
        done.returncode == 0
        and len(losses) >= 4
        and all(math.isfinite(x) for x in losses)
        and losses[-1] < losses[0]
    )
    return row


def stacks(work: Path) -> list[tuple[str, Path, list[str], dict[str, str], re.Pattern[str]]]:
    """Each stack: its name, its tree (copied into `work`), its command, environment and loss lines."""
    megatron = work / "Megatron-LM"
    shutil.copytree(checkout(MEGATRON_LM), megatron)
    wan = work / "Wan2.1"
    shutil.copytree(checkout(WAN_2_1), wan)
    shutil.copy(WAN_ENTRY, wan / WAN_ENTRY.name)
    diffusers = {"PYTHONPATH": str(fetch(DIFFUSERS).parent)}
    return [
        ("Megatron-LM core_v0.12.1 pretrain_gpt.py", megatron, [*TORCHRUN, "pretrain_gpt.py", *PRETRAIN_GPT],
         ENVIRONMENT, LOSS),
        ("Wan2.1 DiT, 4 training steps", wan, ["python", WAN_ENTRY.name], diffusers, WAN_LOSS),
    ]  # fmt: skip


def main() -> int:
    print(f"{'run':58} {'rc':>3} {'loss per iteration':>44} {'s':>6}  verdict")
    with tempfile.TemporaryDirectory(prefix="npu-migrate-stack-") as folder:
        work = Path(folder)
        for stack, tree, command, env, loss in stacks(work):
            for unsafe in (False, True):
                row = run_migrated(tree, unsafe, work, command, env, loss)
                name = f"{stack}, apply{' --unsafe' if unsafe else ''}"
                losses = " ".join(f"{x:.4f}" for x in row["losses"])  # type: ignore[attr-defined]
                verdict = "PASS" if row["passed"] else f"FAIL {row.get('error', '')}"
                print(f"{name:58} {row['rc']:>3} {losses:>44} {row['seconds']:>6.1f}  {verdict}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
