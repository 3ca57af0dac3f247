"""The forecast on real models that need torchvision (benchmarks/forecast_real.py: torchvision's
Faster R-CNN, Wan2.1's video DiT after `apply --unsafe`, diffusers' DiT as the control), where an
environment with torchvision is named (NPU_MIGRATE_TORCHVISION_PYTHON: torch 2.14.1 with
torchvision 0.29.1; the tests' own torch has none, so this is skipped there)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "forecast_real.py"
PYTHON = os.environ.get("NPU_MIGRATE_TORCHVISION_PYTHON", "")


@pytest.mark.skipif(not Path(PYTHON or "/nonexistent").exists(), reason="no environment with torchvision")
def test_real_models_with_torchvision_forecast_what_they_have():
    ran = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    verdicts = [line.rsplit(" (", 1)[0] for line in ran.stdout.splitlines() if line[:4] in ("PASS", "FAIL")]
    assert verdicts == [
        "PASS torchvision Faster R-CNN",
        "PASS Wan2.1 DiT, apply --unsafe",
        "PASS diffusers DiT (control)",
    ]
