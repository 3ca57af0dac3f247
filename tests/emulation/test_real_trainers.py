"""Real distributed trainers we did not write, migrated by `apply` and run with two ranks under
`npu-migrate run --emulate`, against the originals run with gloo on the CPU: accelerate 1.6.0's
own multi-process training script (pinned by sha256, tests/sources.py), started with `accelerate
launch` as its CI starts them. The originals run as MULTI_CPU; the migrated copies as MULTI_NPU
over hccl, where accelerate takes its NPU paths (its gather into a flat tensor, GradScaler for
fp16). Losses are read step by step, without touching the trainer, by losses/sitecustomize.py.
(Its test_sync.py is left out: it draws its data unseeded and its gradient checks fail by chance,
on the CPU original as on the emulation.)"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.real_trainers import LOSSES, losses
from tests.fixture_cases import run_cli
from tests.sources import ACCELERATE, fetch

pytest.importorskip("torch")

SCRIPTS = "src/accelerate/test_utils/scripts"
LAUNCH = ["-m", "accelerate.commands.launch", "--num_processes", "2", "--multi_gpu"]


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    work = tmp_path_factory.mktemp("accelerate")
    original = work / "original"
    shutil.copytree(fetch(ACCELERATE), original)
    applied = run_cli("apply", original, "--out", work / "migrated", "--no-change-list", cwd=work)
    assert applied.returncode in (0, 1), applied.stdout + applied.stderr
    return original, work / "migrated"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def launch(
    tree: Path, script: str, emulate: bool, log: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`accelerate launch` of one of its scripts in `tree`: the original as it runs here, the
    migrated copy through `npu-migrate run --emulate`."""
    env = {"PYTHONPATH": os.pathsep.join([str(tree / "src"), str(LOSSES)])}
    port = ["--main_process_port", str(_free_port())]  # not accelerate's 29500: other tests launch too
    if log is not None:
        env |= {"LOSS_LOG": str(log), "LOSS_SCRIPT": script}
    if emulate:
        return run_cli("run", "--emulate", "python", *LAUNCH, *port, f"{SCRIPTS}/{script}", cwd=tree, env=env)
    command = [sys.executable, *LAUNCH, *port, f"{SCRIPTS}/{script}"]
    return subprocess.run(
        command, cwd=tree, env={**os.environ, **env}, capture_output=True, text=True, check=False
    )


def test_training_checks_pass_and_lose_what_the_original_loses_step_by_step(
    trees: tuple[Path, Path], tmp_path: Path
) -> None:
    original, migrated = trees
    before = launch(original, "test_script.py", emulate=False, log=tmp_path / "cpu")
    after = launch(migrated, "test_script.py", emulate=True, log=tmp_path / "npu")
    assert before.returncode == 0, before.stdout[-2000:] + before.stderr[-3000:]
    assert after.returncode == 0, after.stdout[-2000:] + after.stderr[-3000:]
    assert "DistributedType.MULTI_CPU" in before.stdout
    assert "DistributedType.MULTI_NPU  Backend: hccl" in after.stdout
    for rank in (0, 1):
        cpu, npu = losses(tmp_path / "cpu", rank), losses(tmp_path / "npu", rank)
        assert len(cpu) == len(npu) >= 100
        # fp16 on the NPU scales the loss by GradScaler's 2**16 before backward, as on a GPU; the
        # CPU original runs no scaler. Every other loss is the original's.
        ratios = [b / a for a, b in zip(cpu, npu, strict=True)]
        assert all(r == pytest.approx(1, rel=1e-6) or r == pytest.approx(2**16, rel=1e-6) for r in ratios)
        assert sum(r == pytest.approx(1, rel=1e-6) for r in ratios) >= len(ratios) // 2
