"""Distributed trainers on the emulation, through the command line (issue 24): DDP, FSDP and FSDP2
(`fully_shard`) trainers written for CUDA, migrated by `apply`, run under
`npu-migrate run --emulate torchrun` with two ranks, train as the originals do on the CPU with
gloo, step for step."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.real_trainers import LOSSES, edit_for_the_cpu
from tests.fixture_cases import FIXTURES, run_cli
from tests.sources import DEEPSPEED, DEEPSPEED_NEEDS, installed

SOURCE = FIXTURES / "distributed" / "src"
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
    "fsdp2_meta_train.py": [
        ('device = torch.device("cuda", rank)', 'device = torch.device("cpu")'),
        ("    torch.cuda.set_device(device)\n", ""),
        ('init_process_group("nccl", device_id=device)', 'init_process_group("gloo")'),
    ],
    "deepspeed_train.py": [
        ('dist_backend="nccl"', 'dist_backend="gloo"'),
        ("batch[0].to(model_engine.local_rank)", "batch[0].to(model_engine.device)"),
        ("batch[1].to(model_engine.local_rank)", "batch[1].to(model_engine.device)"),
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


def original_on_the_cpu(
    name: str, folder: Path, launch: list[str] | None = None, env: dict[str, str] | None = None
) -> list[float]:
    """The trainer `name`, in a copy of the fixture tree at `folder` with its edits to run with
    gloo on the CPU, started by `launch` (torchrun of it with two ranks by default)."""
    shutil.copytree(SOURCE, folder)
    missing = edit_for_the_cpu(folder / name, ON_THE_CPU[name])
    assert missing is None, f"{name} no longer has {missing!r}"
    return losses(
        subprocess.run(
            launch or [*TORCHRUN, name],
            cwd=folder,
            # LOSSES: its sitecustomize settles gloo at exit
            env={**os.environ, "PYTHONPATH": str(LOSSES), **(env or {})},
            capture_output=True,
            text=True,
            check=False,
        )
    )


@pytest.mark.parametrize("name", sorted(set(ON_THE_CPU) - {"deepspeed_train.py", "fsdp2_meta_train.py"}))
def test_a_migrated_trainer_trains_as_the_original_on_two_ranks(name: str, tmp_path: Path) -> None:
    migrated = tmp_path / "migrated"
    applied = run_cli("apply", SOURCE, "--out", migrated, "--change-list", tmp_path / "c.csv", cwd=tmp_path)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    text = (migrated / name).read_text()
    assert "cuda" not in text.replace("torch.npu", "") and '"hccl"' in text, text
    emulated = losses(run_cli("run", "--emulate", *TORCHRUN, name, cwd=migrated))
    assert emulated == pytest.approx(original_on_the_cpu(name, tmp_path / "cpu"), rel=1e-6)


def test_an_fsdp2_trainer_built_on_meta_draws_its_shards_on_the_npu_and_resumes_as_the_original(
    tmp_path: Path,
) -> None:
    """PyTorch's FSDP2 example's form: built on the meta device, `to_empty` on the NPU, then
    reset_parameters, where DTensor draws every shard with the NPU's offset-based RNG tracker
    (which the CPU has not: the fresh runs start apart, rightly). The migrated copy trains and
    saves; from that checkpoint, it trains as the original does on the CPU, step for step."""
    name = "fsdp2_meta_train.py"
    migrated, start = tmp_path / "migrated", tmp_path / "start.pt"
    run_cli("apply", SOURCE, "--out", migrated, "--change-list", tmp_path / "c.csv", cwd=tmp_path)
    fresh = losses(run_cli("run", "--emulate", *TORCHRUN, name, "--save", start, cwd=migrated))
    assert len(fresh) == 4 and all(math.isfinite(loss) for loss in fresh), fresh
    resumed = losses(run_cli("run", "--emulate", *TORCHRUN, name, "--resume", start, cwd=migrated))
    original = original_on_the_cpu(name, tmp_path / "cpu", launch=[*TORCHRUN, name, "--resume", str(start)])
    assert resumed == pytest.approx(original, rel=1e-6)


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
    assert emulated == pytest.approx(original_on_the_cpu(trainer, tmp_path / "cpu"), rel=1e-6)


def test_a_migrated_deepspeed_launch_script_trains_as_the_original(tmp_path: Path) -> None:
    """DeepSpeed 0.19.8 (built from its PyPI source): `deepspeed --include localhost:0,1` in a
    migrated launch script, run by `npu-migrate run --emulate --npus 2`, starts its ranks on a host
    with two emulated NPUs, which train with ZeRO stage 1 on hccl (DeepSpeed's NPU accelerator)
    as the original does with DeepSpeed's CPU accelerator and gloo, step for step."""
    deepspeed = installed(DEEPSPEED, DEEPSPEED_NEEDS, {"DS_BUILD_OPS": "0"})
    path = os.pathsep.join([str(deepspeed / "bin"), os.environ["PATH"]])
    env = {"PYTHONPATH": str(deepspeed), "PATH": path}
    migrated = tmp_path / "migrated"
    run_cli("apply", SOURCE, "--out", migrated, "--change-list", tmp_path / "c.csv", cwd=tmp_path)
    assert 'dist_backend="hccl"' in (migrated / "deepspeed_train.py").read_text()
    emulated = losses(run_cli("run", "--emulate", "--npus", "2", "run_deepspeed.sh", cwd=migrated, env=env))
    launch = [str(deepspeed / "bin" / "deepspeed"), "--num_gpus", "2"]  # the CPU accelerator's slots
    launch += ["deepspeed_train.py", "--deepspeed", "--deepspeed_config", "ds_config.json"]
    cpu_env = {"PATH": path, "DS_ACCELERATOR": "cpu", "PYTHONPATH": f"{deepspeed}:{LOSSES}"}
    original = original_on_the_cpu("deepspeed_train.py", tmp_path / "cpu", launch, cpu_env)
    assert len(emulated) == 8 and emulated == pytest.approx(original, rel=1e-6)


def test_a_launch_script_counting_the_hosts_gpus_counts_the_emulated_hosts_npus(tmp_path: Path) -> None:
    """A script that starts one rank per GPU it counts with `nvidia-smi -L | wc -l`, migrated (the
    NPUs' chips counted from `npu-smi info -l`) and run with `run --emulate --npus 2`, starts two
    ranks, which train as the original does on two CPU ranks."""
    migrated = tmp_path / "migrated"
    run_cli("apply", SOURCE, "--out", migrated, "--change-list", tmp_path / "c.csv", cwd=tmp_path)
    launcher = (migrated / "run_all_gpus.sh").read_text()
    assert "GPUS_PER_NODE=$(npu-smi info -l | awk" in launcher and "nvidia" not in launcher, launcher
    emulated = losses(run_cli("run", "--emulate", "--npus", "2", "run_all_gpus.sh", cwd=migrated))
    assert emulated == pytest.approx(original_on_the_cpu("ddp_train.py", tmp_path / "cpu"), rel=1e-6)
