"""The video and image stacks' cases, on files written in their forms (fixtures/stacks): every
flash-attn use rewritten through a run-time helper or reported at its line (Wan2.1),
compute-capability checks reported and the renames that would reach them held (sam2), diffusers'
CPU offload given the NPU (HunyuanVideo), a class's own cuda() left to it (flux), a device helper
whose caller is in the file fixed (LTX-Video); the migrated files run on the emulation where the
originals' GPU path ran."""

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
        # the CUDA assertion: what it guards that stays CUDA runs only where flash-attn imported
        ("wan_attention.py", 22, "NPU105", "safe"),
        ("wan_attention.py", 28, "NPU806", "manual"),  # the FA3 varlen call: a tuple, FA3's own
        ("wan_attention.py", 41, "NPU929", "unsafe"),  # the FA2 call: window, variable causal
        ("sam2_misc.py", 9, "NPU101", "held"),  # is_available would lead to .major on an NPU
        ("sam2_misc.py", 10, "NPU121", "manual"),
        ("sam2_misc.py", 11, "NPU121", "manual"),
        ("hunyuan_sample.py", 6, "NPU120", "safe"),
        ("flux_engine.py", 25, "NPU103", "held"),  # self.cuda() is the class's own method
        ("ltx_inference.py", 8, "NPU101", "safe"),  # get_device's caller is in the file:
        ("ltx_inference.py", 9, "NPU105", "safe"),  # its "cuda" is a device, fixed, not held
    ]:
        assert expected in found, expected


def test_the_migrated_files_run_on_the_emulation(tmp_path: Path) -> None:
    migrated = tmp_path / "migrated"
    run_cli("apply", "src", "--out", migrated, "--change-list", tmp_path / "c.csv", cwd=PROJECT)
    assert 'enable_sequential_cpu_offload(device="npu")' in (migrated / "hunyuan_sample.py").read_text()
    engine = run_cli("run", "--emulate", "flux_engine.py", cwd=migrated)
    assert engine.returncode == 0 and "engine on npu, loaded: True" in engine.stdout, engine.stderr
    latents = run_cli("run", "--emulate", "ltx_inference.py", cwd=migrated)
    assert latents.returncode == 0 and "latents on npu" in latents.stdout, latents.stderr
    sdpa = run_cli("run", "--emulate", "sam2_misc.py", cwd=migrated)
    assert sdpa.returncode == 0 and "sdpa settings: (True, False, True)" in sdpa.stdout, sdpa.stderr


def test_wan_attention_runs_on_the_npu_operator_after_unsafe(tmp_path: Path) -> None:
    """flash-attn 2's varlen call, its lengths computed and `causal` a variable, goes through
    the helper to npu_fusion_attention; FlashAttention 3 is left behind its own import's flag,
    which an NPU host never sets, so the CUDA assertion before both is rewritten."""
    migrated = tmp_path / "migrated"
    run_cli("apply", "src", "--unsafe", "--out", migrated, "--change-list", tmp_path / "c.csv", cwd=PROJECT)
    code = (migrated / "wan_attention.py").read_text()
    assert 'assert q.device.type == "npu"' in code and "import flash_attn\n" not in code
    attention = run_cli("run", "--emulate", "wan_attention.py", cwd=migrated)
    assert attention.returncode == 0, attention.stderr
    assert "causal attention matches SDPA: True" in attention.stdout, attention.stdout
