"""A few hundred fuzz cases (tests/fuzz.py) on every run of the suite: mutated real files through
the engine as a run drives it, with no crash, no hang and no rewrite that its language's own tool
refuses: Python files, and every other kind of file the tool reads on its own."""

from __future__ import annotations

from pathlib import Path

from tests.fuzz import corpus, run, run_tree

NOT_PYTHON = frozenset({s.kind for s in corpus()} - {"python"})


def test_mutated_real_files_neither_crash_hang_nor_break() -> None:
    failures = run(count=300, seed=7, seconds=20, kinds=frozenset({"python"}))
    assert failures == []


def test_mutated_launch_scripts_configs_and_dependency_files_neither_crash_hang_nor_break() -> None:
    assert len(NOT_PYTHON) >= 10, NOT_PYTHON  # shell, notebook, config, requirements, makefile...
    failures = run(count=400, seed=11, seconds=20, kinds=NOT_PYTHON)
    assert failures == []


def test_a_tree_of_mutated_files_through_scan_and_apply(tmp_path: Path) -> None:
    assert run_tree(count=150, seed=3, folder=tmp_path / "tree") == []
