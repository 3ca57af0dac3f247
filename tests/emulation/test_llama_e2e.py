"""The fused-operator rules end to end: `apply --unsafe` on a tiny LLaMA-style trainer
(RMSNorm, RoPE, causal SDPA with GQA, SwiGLU MLP, AdamW), then the migrated copy runs under
`npu-migrate run --emulate` and trains like the original, step for step, within fp32 tolerance."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixture_cases import FIXTURES, run_cli

pytest.importorskip("torch")


def losses(output: str) -> list[float]:
    return json.loads(output.strip().splitlines()[-1])["losses"]


def test_fused_llama_trains_like_the_original(tmp_path: Path) -> None:
    source = FIXTURES / "llama_tiny" / "src"
    migrated = tmp_path / "migrated"
    applied = run_cli(
        "apply", source, "--unsafe", "--out", migrated, "--change-list", tmp_path / "c.csv", cwd=tmp_path
    )
    assert applied.returncode == 0, applied.stdout + applied.stderr  # a note: a suggestion
    assert "Left as it is (1: 1 note)" in applied.stdout, "the SwiGLU advice"
    # RoPE and SDPA get q and k handed in: what the operators need of them (4-D, their dtype,
    # the head dim) is checked as the model runs, by the guards the rewrite writes beside them
    model = (migrated / "model.py").read_text()
    for fused in ("npu_rms_norm", "npu_rotary_mul", "npu_fusion_attention"):
        assert f"torch_npu.{fused}(" in model
    assert "if why_not_npu_rotary_mul(q, cos, sin, npu_rotary_mode(rotate_half)) is None" in model
    assert "is None else F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))" in model
    assert "fused=True)" in (migrated / "train.py").read_text()

    original = subprocess.run(
        [sys.executable, "train.py", "--steps", "6"], cwd=source, capture_output=True, text=True, check=True
    )
    emulated = run_cli("run", "--emulate", "train.py", "--steps", "6", cwd=migrated)
    assert emulated.returncode == 0, emulated.stderr
    expected, got = losses(original.stdout), losses(emulated.stdout)
    assert len(got) == 6 and got[-1] < got[0]
    assert got == pytest.approx(expected, rel=1e-5, abs=1e-6)
