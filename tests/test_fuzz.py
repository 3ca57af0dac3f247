"""A few hundred fuzz cases (tests/fuzz.py) on every run of the suite: mutated real files through
the engine as a run drives it, with no crash, no hang and no rewrite that does not parse."""

from __future__ import annotations

from tests.fuzz import run


def test_mutated_real_files_neither_crash_hang_nor_break() -> None:
    failures = run(count=300, seed=7, seconds=20)
    assert failures == []
