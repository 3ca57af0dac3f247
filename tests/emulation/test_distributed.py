"""Distributed trainers on the emulation, through the command line (issue 24): DDP, FSDP and FSDP2
(`fully_shard`) trainers written for CUDA, migrated by `apply`, run under
`npu-migrate run --emulate torchrun` with two ranks, train as the originals do on the CPU with
gloo, step for step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixture_cases import FIXTURES, run_cli

SOURCE = FIXTURES / "distributed" / "src"
SETTLING = Path(__file__).parent / "losses"  # its sitecustomize settles threads at exit (gloo's)
TORCHRUN = [str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc_per_node", "2"]
ON_THE_CPU = {  # what the original needs to run with gloo on the CPU, and nothing else
    "ddp_train.py": [
        ('    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))\n', ""),
        ('backend="nccl"', 'backend="gloo"'),
        ("DDP(model.to(self.gpu_id), device_ids=[self.gpu_id])", "DDP(model)"),
        ("source.to(self.gpu_id), targets.to(self.gpu_id)", "source, targets"),
        ('device=f"cuda:{self.gpu_id}"', 'device="cpu"'),
    ],
    "fsdp2_train.py": [
        ('    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))\n', ""),
        ('init_process_group("nccl")', 'init_process_group("gloo")'),
        ('init_device_mesh("cuda"', 'init_device_mesh("cpu"'),
        (".cuda()", ""),
    ],
    "fsdp_train.py": [
        ("    torch.cuda.set_device(local_rank)\n", ""),
        ('init_process_group("nccl")', 'init_process_group("gloo")'),
        ("device_id=torch.cuda.current_device()", 'device_id=torch.device("cpu")'),
        (".cuda()", ""),
    ],
}


def losses(result: subprocess.CompletedProcess[str]) -> list[float]:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith('{"losses"'))
    return json.loads(line)["losses"]


def original_on_the_cpu(name: str, folder: Path) -> list[float]:
    text = (SOURCE / name).read_text()
    for old, new in ON_THE_CPU[name]:
        assert old in text, f"{name} no longer has {old!r}"
        text = text.replace(old, new)
    (folder / name).write_text(text)
    return losses(
        subprocess.run(
            [*TORCHRUN, name],
            cwd=folder,
            env={**os.environ, "PYTHONPATH": str(SETTLING)},
            capture_output=True,
            text=True,
            check=False,
        )
    )


@pytest.mark.parametrize("name", sorted(ON_THE_CPU))
def test_a_migrated_trainer_trains_as_the_original_on_two_ranks(name: str, tmp_path: Path) -> None:
    migrated = tmp_path / "migrated"
    applied = run_cli("apply", SOURCE, "--out", migrated, "--change-list", tmp_path / "c.csv", cwd=tmp_path)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    text = (migrated / name).read_text()
    assert "cuda" not in text.replace("torch.npu", "") and '"hccl"' in text, text
    emulated = losses(run_cli("run", "--emulate", *TORCHRUN, name, cwd=migrated))
    cpu = tmp_path / "cpu"
    cpu.mkdir()
    assert emulated == pytest.approx(original_on_the_cpu(name, cpu), rel=1e-6)


@pytest.mark.parametrize(
    ("script", "trainer"), [("run_ddp.sh", "ddp_train.py"), ("run_fsdp2.sh", "fsdp2_train.py")]
)
def test_a_migrated_launch_script_runs_its_ranks_on_the_emulation(
    script: str, trainer: str, tmp_path: Path
) -> None:
    """`npu-migrate run --emulate train.sh`: the launcher the script starts (torchrun, `python -m
    torch.distributed.run`) and every rank it starts run on the emulation, with the devices the
    migrated script makes visible."""
    migrated = tmp_path / "migrated"
    run_cli("apply", SOURCE, "--out", migrated, "--change-list", tmp_path / "c.csv", cwd=tmp_path)
    launcher = (migrated / script).read_text()
    assert "ASCEND_RT_VISIBLE_DEVICES=0,1" in launcher and "CUDA" not in launcher, launcher
    emulated = losses(run_cli("run", "--emulate", script, cwd=migrated))
    cpu = tmp_path / "cpu"
    cpu.mkdir()
    assert emulated == pytest.approx(original_on_the_cpu(trainer, cpu), rel=1e-6)
