"""Decisions taken across the files of a run (engine/program/run.py), through the command line:
a mock's dotted target follows the code the mocking file imports (mmengine's logger test mocks
`torch.cuda.is_available` for `_get_device_id`, which is migrated, while its device utilities,
which keep an NPU path beside CUDA, keep calling torch.cuda)."""

from __future__ import annotations

from pathlib import Path

from npu_migrate.engine.index import RuleIndex
from npu_migrate.model import SourceFile
from npu_migrate.rules.load import load_rules
from npu_migrate.word_holds import WordHold, words_elsewhere
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


SGD_FILE = "import torch\nmodel = torch.nn.Linear(4, 4)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"


def test_a_word_another_file_mentions_holds_a_fix_in_one_pass_and_without_it_frees_it(tmp_path: Path) -> None:
    """Fused SGD refuses sparse gradients (NPU912 holds for `sparse`): the file that builds the
    optimizer learns before its pass that another file mentions the word; the result cache keys
    it by that, so the same run after the mention is gone makes the fix."""
    (tmp_path / "optim.py").write_text(SGD_FILE)
    (tmp_path / "embed.py").write_text("import torch\nlayer = torch.nn.Embedding(10, 4, sparse=True)\n")
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    scanned = run_cli("scan", ".", cwd=tmp_path, env=env)
    assert "embed.py mentions sparse" in scanned.stdout, scanned.stdout + scanned.stderr
    (tmp_path / "embed.py").write_text("import torch\nlayer = torch.nn.Embedding(10, 4)\n")
    again = run_cli("scan", ".", cwd=tmp_path, env=env)
    assert "NPU912" in again.stdout and "mentions sparse" not in again.stdout, again.stdout


def test_only_a_file_a_word_holding_rule_may_match_learns_the_words(tmp_path: Path) -> None:
    """A file the rule cannot match keeps its module path (and so its cache key) as it was."""
    optim, plain, embed = (
        SourceFile(tmp_path / name, name, data.encode())
        for name, data in (("optim.py", SGD_FILE), ("plain.py", "x = 1\n"), ("embed.py", "sparse = True\n"))
    )
    sgd = next(rule for rule in load_rules() if rule.code == "NPU912")
    assert sgd.hold_in_files_with is not None
    hold = WordHold(tuple(sgd.hold_in_files_with.words), RuleIndex([sgd]).prefilter)
    known = words_elsewhere([optim, plain, embed], [hold])
    assert known[0].module.words_elsewhere == (("sparse", "embed.py"),)
    assert known[1] is plain and known[2] is embed
