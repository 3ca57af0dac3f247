"""Decisions taken across the files of a run (engine/program/run.py), through the command line:
a mock's dotted target follows the code the mocking file imports (mmengine's logger test mocks
`torch.cuda.is_available` for `_get_device_id`, which is migrated, while its device utilities,
which keep an NPU path beside CUDA, keep calling torch.cuda)."""

from __future__ import annotations

from pathlib import Path

from tests.fixture_cases import run_cli

KEEPS = """import torch

try:
    import torch_npu  # noqa: F401
except ImportError:
    torch_npu = None


def have_gpu():
    return torch.cuda.is_available()
"""
RENAMES = "import torch\n\n\ndef device_id():\n    return 1 if torch.cuda.is_available() else 0\n"
TEST = """from unittest.mock import patch

from pkg.{module} import {function}


@patch("torch.cuda.is_available", lambda: True)
def test_it():
    assert {function}()
"""


def test_a_mock_follows_the_code_its_file_imports(tmp_path: Path) -> None:
    tree = tmp_path / "project"
    (tree / "pkg").mkdir(parents=True)
    (tree / "tests").mkdir()
    (tree / "pkg" / "__init__.py").write_text("")
    (tree / "pkg" / "keeps.py").write_text(KEEPS)
    (tree / "pkg" / "renames.py").write_text(RENAMES)
    (tree / "tests" / "test_keeps.py").write_text(TEST.format(module="keeps", function="have_gpu"))
    (tree / "tests" / "test_renames.py").write_text(TEST.format(module="renames", function="device_id"))
    result = run_cli("apply", str(tree), "--no-change-list", cwd=tmp_path)
    assert result.returncode in (0, 1), result.stderr
    assert '@patch("torch.npu.is_available"' in (tree / "tests" / "test_renames.py").read_text()
    assert '@patch("torch.cuda.is_available"' in (tree / "tests" / "test_keeps.py").read_text()
    assert "this file mocks `torch.cuda.is_available`, which" in result.stdout
    assert "pkg/keeps.py:10 keeps calling" in result.stdout
