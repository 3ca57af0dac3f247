"""A few hundred fuzz cases (tests/fuzz.py) on every run of the suite: mutated real files through
the engine as a run drives it, with no crash, no hang and no rewrite that does not parse."""

from __future__ import annotations

from pathlib import Path

from tests.fuzz import run, run_tree


def test_mutated_real_files_neither_crash_hang_nor_break() -> None:
    failures = run(count=300, seed=7, seconds=20)
    assert failures == []


def test_a_tree_of_mutated_files_through_scan_and_apply(tmp_path: Path) -> None:
    assert run_tree(count=150, seed=3, folder=tmp_path / "tree") == []
