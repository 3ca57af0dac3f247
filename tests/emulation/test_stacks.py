"""The video and image stacks' cases, on files written in their forms (fixtures/stacks): every
flash-attn use reported at its line (Wan2.1), compute-capability checks reported and the renames
that would reach them held (sam2), diffusers' CPU offload given the NPU (HunyuanVideo), a class's
own cuda() left to it (flux); the migrated files run on the emulation where the originals' GPU
path ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixture_cases import FIXTURES, run_cli

pytest.importorskip("torch")

PROJECT = FIXTURES / "stacks"


def test_every_blocker_is_rewritten_or_reported_at_its_line() -> None:
    findings = json.loads(run_cli("scan", "src", "--format", "json", cwd=PROJECT).stdout)["findings"]
    found = {(Path(f["file"]).name, f["line"], f["code"], f["label"]) for f in findings}
    for expected in [
        ("wan_attention.py", 6, "NPU806", "manual"),  # import flash_attn_interface (FlashAttention 3)
        ("wan_attention.py", 13, "NPU806", "manual"),
        ("wan_attention.py", 22, "NPU105", "held"),  # the CUDA assertion guards flash-attn left
        ("wan_attention.py", 28, "NPU806", "manual"),  # the FA3 varlen call: computed lengths
        ("wan_attention.py", 41, "NPU806", "manual"),  # the FA2 call: window, variable causal
        ("sam2_misc.py", 9, "NPU101", "held"),  # is_available would lead to .major on an NPU
        ("sam2_misc.py", 10, "NPU121", "manual"),
        ("sam2_misc.py", 11, "NPU121", "manual"),
        ("hunyuan_sample.py", 6, "NPU120", "safe"),
        ("flux_engine.py", 25, "NPU103", "held"),  # self.cuda() is the class's own method
    ]:
        assert expected in found, expected


def test_the_migrated_files_run_on_the_emulation(tmp_path: Path) -> None:
    migrated = tmp_path / "migrated"
    run_cli("apply", "src", "--out", migrated, "--change-list", tmp_path / "c.csv", cwd=PROJECT)
    assert 'enable_sequential_cpu_offload(device="npu")' in (migrated / "hunyuan_sample.py").read_text()
    engine = run_cli("run", "--emulate", "flux_engine.py", cwd=migrated)
    assert engine.returncode == 0 and "engine on npu, loaded: True" in engine.stdout, engine.stderr
    sdpa = run_cli("run", "--emulate", "sam2_misc.py", cwd=migrated)
    assert sdpa.returncode == 0 and "sdpa settings: (True, False, True)" in sdpa.stdout, sdpa.stderr
