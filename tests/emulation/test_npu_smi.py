"""The emulated host's npu-smi and its NPU count (`run --emulate --npus N`), through the command
line: what launch scripts read from `npu-smi info -l`, and the one-line refusals."""

from __future__ import annotations

from pathlib import Path

from tests.fixture_cases import run_cli

ASKS = """#!/bin/bash
npu-smi info -l | grep -c "NPU ID"
npu-smi info -l | grep "Total Count" | awk -F ':' '{print $2}' | tr -d ' '
npu-smi info | grep -c "npu-migrate emulation"
python -c "import torch; print(torch.npu.device_count())"
npu-smi -L
"""


def test_npu_smi_lists_as_many_npus_as_the_emulated_host_has(tmp_path: Path) -> None:
    (tmp_path / "asks.sh").write_text(ASKS)
    result = run_cli("run", "--emulate", "--npus", "3", "asks.sh", cwd=tmp_path)
    assert result.stdout.split() == ["3", "3", "3", "3"], result.stdout + result.stderr
    assert "npu-smi -L: the emulated host's npu-smi answers `npu-smi info` and `npu-smi info -l` only" in (
        result.stderr
    )
    one = run_cli("run", "--emulate", "asks.sh", cwd=tmp_path)  # no --npus, no launcher: one NPU
    assert one.stdout.split() == ["1", "1", "1", "1"], one.stdout + one.stderr


def test_npus_without_the_emulation_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "asks.sh").write_text(ASKS)
    result = run_cli("run", "--no-emulate", "--npus", "2", "asks.sh", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --npus sets the emulated host's NPUs: it needs the emulation (--emulate)"
    )
