"""Real training stacks' own entry points after `apply` (and `apply --unsafe`), run on the NPU
emulation: Megatron-LM core_v0.12.1's `pretrain_gpt.py` (the release Ascend's MindSpeed ports), a
tiny GPT with mock data, tensor-parallel size 2 under torchrun, bf16, and none of Megatron's
fusion arguments given (its defaults ask for Transformer Engine, apex's fusions and a CUDA kernel
build at start-up); its mixture of experts on the grouped GEMM (`--moe-grouped-gemm`, two
expert-parallel ranks; `apply` must stop at the CUDA package, `--unsafe` runs it on
`npu_grouped_matmul`; the one line NPU106 leaves to a human, the compute-capability check, edited
as it asks); and the same release's own unit tests of its tensor-parallel layers, RNG
tracker, softmax, MLP, attention and RoPE on the 8 ranks they assume (every rank passes the same
number of tests); and Wan2.1's video DiT (`wan/modules/model.py`, every attention through
flash-attn 3 or 2) trained a few steps by a user's script in CUDA form (benchmarks/stacks). Their
originals need CUDA and cannot run on the CPU, so the verdict is that the run finishes with finite
losses whose last is below its first. Wan's attention is flash-attn's alone: `apply` reports it
and the run stops at Wan's own `assert FLASH_ATTN_2_AVAILABLE`; `--unsafe` rewrites it. And a
diffusers pipeline with CPU offload (benchmarks/stacks), as HunyuanVideo's `--use-cpu-offload`
runs: its images must equal the CPU run's; and sam2's image predictor as its README runs it, in
a second environment with torchvision (NPU_MIGRATE_TORCHVISION_PYTHON; skipped without it): its
masks must equal the CPU run's.

    python benchmarks/real_stacks.py

Megatron-LM and Wan2.1 come from git mirrors at pinned commits (tests/sources.py: `fetch
github:NVIDIA/Megatron-LM`, `fetch github:Wan-Video/Wan2.1`); Megatron's dataset helpers build
with pybind11 and its tokenizers import six (the `dev` extra has both); Wan's model imports
diffusers, whose pinned wheel (tests/sources.py) goes on its path, with accelerate's sdist for
the offload. Prints one row per run; always exits 0."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.sources import (
    ACCELERATE,
    DIFFUSERS,
    MEGATRON_LM,
    MEGATRON_LM_TESTS,
    SAM2_PACKAGE,
    WAN_2_1,
    checkout,
    fetch,
)

TORCHRUN = [str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc_per_node", "2"]
PRETRAIN_GPT = (
    "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "64",
    "--max-position-embeddings", "64", "--micro-batch-size", "2", "--global-batch-size", "4",
    "--train-iters", "4", "--lr", "1e-4", "--mock-data", "--tokenizer-type", "NullTokenizer",
    "--vocab-size", "128", "--tensor-model-parallel-size", "2", "--bf16", "--log-interval", "1",
    "--eval-iters", "0",
)  # fmt: skip
# Its mixture of experts on the grouped GEMM (`--moe-grouped-gemm`): Megatron refuses MoE with
# tensor parallelism unless sequence parallelism is on, which its torch LayerNorm refuses, so the
# two ranks hold two experts each; its mock data draws token ids up to 4096 (a vocabulary-parallel
# embedding masks the rest, a whole one does not).
PRETRAIN_GPT_MOE = (
    *PRETRAIN_GPT[: PRETRAIN_GPT.index("--lr")], "--lr", "1e-2", "--mock-data", "--tokenizer-type",
    "NullTokenizer", "--vocab-size", "8192", "--tensor-model-parallel-size", "1",
    "--expert-model-parallel-size", "2", "--bf16", "--log-interval", "1", "--eval-iters", "0",
    "--num-experts", "4", "--moe-grouped-gemm", "--disable-bias-linear", "--moe-router-topk", "2",
)  # fmt: skip
# What NPU106 asks a human to do there (`torch.cuda.get_device_capability` has no NPU meaning).
CAPABILITY_CHECK = (
    "megatron/training/arguments.py",
    "        dc = torch.cuda.get_device_capability()\n"
    '        assert dc[0] >= 8, "Unsupported compute capability for GroupedGEMM kernels."\n',
    "",
)
# Megatron's own unit tests of what a port touches: its tensor-parallel layers and RNG tracker,
# the softmax, MLP, core attention and RoPE, on the 8 ranks they assume. Its conftest asks
# Transformer Engine's version in an autouse fixture, and test_initialization.py imports Megatron's
# Transformer Engine wrapper: both stop at the `import transformer_engine` the scan reports
# (NPU851), so the conftest is not loaded and that file is left out.
MEGATRON_TESTS = (
    "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest",
    "--ignore", "tests/unit_tests/tensor_parallel/test_initialization.py",
    "tests/unit_tests/tensor_parallel", "tests/unit_tests/fusions",
    "tests/unit_tests/transformer/test_mlp.py", "tests/unit_tests/transformer/test_core_attention.py",
    "tests/unit_tests/transformer/test_rope.py",
)  # fmt: skip
# Megatron refuses tensor parallelism without it; its launch scripts export it (kept by `apply`)
ENVIRONMENT = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
LOSS = re.compile(r"iteration\s+\d+/\s*\d+ .*?lm loss: ([-\d.E+]+)")
FRAME = re.compile(r'File "([^"]+)", line (\d+)')
STACKS = Path(__file__).with_name("stacks")  # the users' scripts, in CUDA form
VISION_MISSING = (
    "sam2 needs torchvision, whose wheels do not load beside the CPU torch: set "
    "NPU_MIGRATE_TORCHVISION_PYTHON to an environment's python with torch==2.14.1 "
    "torchvision==0.29.1 hydra-core iopath"
)


@dataclass(frozen=True)
class Stack:
    """A real stack's run: its tree, the command run there, and what its output must show."""

    name: str
    tree: Path
    command: list[str]
    env: dict[str, str]
    values: re.Pattern[str]  # the figures it prints (losses, or a difference to a reference)
    passed: Callable[[list[float], str], bool]  # (those figures, stdout) -> the verdict
    needs_unsafe: str = ""  # why `apply` alone cannot run it (the run must then stop)
    missing: str = ""  # why it cannot run here at all (printed as SKIP)
    # (file, text, replacement): what a manual finding asks a human to edit, done before the run
    hand_edits: tuple[tuple[str, str, str], ...] = ()


def trains(values: list[float], _: str) -> bool:
    """At least 4 finite losses, the last below the first."""
    return len(values) >= 4 and all(math.isfinite(x) for x in values) and values[-1] < values[0]


def matches_on_the_npu(values: list[float], said: str) -> bool:
    """Offloaded to the NPU, and the same images as the CPU run."""
    return "offloaded to npu" in said and len(values) == 1 and values[0] <= 1e-5


def every_rank_passes(values: list[float], _: str) -> bool:
    """pytest's count of passed tests from each of the 8 ranks, the same and above 0 (the run's
    exit status says none failed)."""
    return len(values) == 8 and len(set(values)) == 1 and values[0] > 0


def same_masks(values: list[float], _: str) -> bool:
    """Every mask pixel as in the CPU run."""
    return values == [1.0]


def run_migrated(stack: Stack, unsafe: bool, work: Path) -> dict[str, object]:
    """`apply` (or `apply --unsafe`) the stack's tree into `work`, then run its command there on
    the emulation."""
    slug = re.sub(r"\W+", "-", stack.name)  # two runs may share a tree
    migrated = work / f"{slug}-{'unsafe' if unsafe else 'safe'}"
    apply = [sys.executable, "-m", "npu_migrate", "apply", str(stack.tree), "--out", str(migrated)]
    unsafe_flag = ["--unsafe"] if unsafe else []
    subprocess.run([*apply, "--no-change-list", *unsafe_flag], capture_output=True, text=True, check=False)
    for path, text, replacement in stack.hand_edits:
        edited = migrated / path
        source = edited.read_text(encoding="utf-8")
        if text not in source:
            missing = f"the hand edit's text is gone from {path}"
            return {"values": [], "seconds": 0.0, "rc": -1, "passed": False, "error": missing}
        edited.write_text(source.replace(text, replacement), encoding="utf-8")
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "npu_migrate", "run", "--emulate", *stack.command],
        cwd=migrated, env={**os.environ, **stack.env}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    values = [float(value) for value in stack.values.findall(done.stdout)]
    row: dict[str, object] = {"values": values, "seconds": seconds, "rc": done.returncode}
    if done.returncode != 0:
        said = [line for line in (done.stderr + done.stdout).splitlines() if "Error" in line]
        frames = FRAME.findall(done.stderr)
        where = f" at {Path(frames[-1][0]).name}:{frames[-1][1]}" if frames else ""
        row["error"] = (said[0] if said else done.stderr[-300:])[:200] + where
    row["passed"] = done.returncode == 0 and stack.passed(values, done.stdout)
    return row


def stacks(work: Path) -> list[Stack]:
    """The stacks, their trees copied into `work`."""
    megatron = work / "Megatron-LM"
    shutil.copytree(checkout(MEGATRON_LM), megatron)
    megatron_tests = work / "Megatron-LM-tests"
    shutil.copytree(checkout(MEGATRON_LM_TESTS), megatron_tests)
    wan = work / "Wan2.1"
    shutil.copytree(checkout(WAN_2_1), wan)
    shutil.copy(STACKS / "wan_dit_train.py", wan)
    offload = work / "diffusers-offload"
    offload.mkdir()
    shutil.copy(STACKS / "diffusers_offload.py", offload)
    diffusers = str(fetch(DIFFUSERS).parent)
    accelerate = str(fetch(ACCELERATE) / "src")
    sam2 = work / "sam2"
    shutil.copytree(checkout(SAM2_PACKAGE), sam2)
    shutil.copy(STACKS / "sam2_predict.py", sam2)
    vision = Path(os.environ.get("NPU_MIGRATE_TORCHVISION_PYTHON", "/nonexistent"))
    beside = os.pathsep.join([str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")])
    pretrain = [*TORCHRUN, "pretrain_gpt.py", *PRETRAIN_GPT]
    return [
        Stack("Megatron-LM core_v0.12.1 pretrain_gpt.py", megatron, pretrain, ENVIRONMENT, LOSS, trains),
        Stack("Megatron-LM core_v0.12.1 MoE grouped GEMM", megatron,
              [*TORCHRUN, "pretrain_gpt.py", *PRETRAIN_GPT_MOE], ENVIRONMENT, LOSS, trains,
              "grouped_gemm is CUDA-only (NPU849)", hand_edits=(CAPABILITY_CHECK,)),
        Stack("Megatron-LM core_v0.12.1 unit tests", megatron_tests,
              [*TORCHRUN[:-1], "8", *MEGATRON_TESTS], {"PYTHONPATH": "."}, re.compile(r"(\d+) passed"),
              every_rank_passes),
        Stack("Wan2.1 DiT, 4 training steps", wan, ["python", "wan_dit_train.py"], {"PYTHONPATH": diffusers},
              re.compile(r"step \d+ loss ([-\d.e+]+)"), trains, "flash-attn is its only attention"),
        Stack("diffusers 0.31 DDPM pipeline, CPU offload", offload, ["python", "diffusers_offload.py"],
              {"PYTHONPATH": os.pathsep.join([diffusers, accelerate])},
              re.compile(r"max difference to the CPU run: ([-\d.e+]+)"), matches_on_the_npu),
        Stack("sam2 image predictor, random weights", sam2, [str(vision), "sam2_predict.py"],
              {"PYTHONPATH": beside, "PATH": f"{vision.parent}{os.pathsep}{os.environ['PATH']}"},
              re.compile(r"mask agreement with the CPU run: ([\d.]+)"), same_masks,
              missing="" if vision.is_file() else VISION_MISSING),
    ]  # fmt: skip


def main() -> int:
    print(f"{'run':58} {'rc':>3} {'losses, or difference to the CPU':>44} {'s':>6}  verdict")
    with tempfile.TemporaryDirectory(prefix="npu-migrate-stack-") as folder:
        for stack in stacks(Path(folder)):
            if stack.missing:
                print(f"{stack.name:58} {'':>3} {'':>44} {'':>6}  SKIP {stack.missing}", flush=True)
                continue
            for unsafe in (False, True):
                row = run_migrated(stack, unsafe, Path(folder))
                name = f"{stack.name}, apply{' --unsafe' if unsafe else ''}"
                values = " ".join(f"{x:.4g}" for x in row["values"])  # type: ignore[attr-defined]
                verdict = "PASS" if row["passed"] else f"FAIL {row.get('error', '')}"
                if stack.needs_unsafe and not unsafe:  # it must stop, at what apply reported
                    outcome = "PASS" if row["rc"] != 0 else "FAIL"
                    verdict = f"{outcome} stops: {stack.needs_unsafe}; {row.get('error', '')}"
                print(f"{name:58} {row['rc']:>3} {values:>44} {row['seconds']:>6.1f}  {verdict}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
