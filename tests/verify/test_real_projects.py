"""Proof by a real project's own tests: accelerate 1.6.0 (pinned by sha256, tests/sources.py), a
training library that already runs on the NPU beside CUDA, migrated by `apply` and tested under
the NPU emulation with a slice of its own suite, test by test against the original.
benchmarks/real_tests.py measures the same with --unsafe and prints the figures."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.real_tests import ACCELERATE_TESTS
from tests.fixture_cases import run_cli
from tests.sources import ACCELERATE, fetch


def test_accelerates_own_tests_pass_on_its_migrated_copy(tmp_path: Path) -> None:
    tree = fetch(ACCELERATE)
    report = tmp_path / "r.json"
    command = f"pytest -q -o pythonpath=src {ACCELERATE_TESTS}"
    result = run_cli(
        "verify", str(tree), "--tests", command, "--no-bisect", "--json", str(report), cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(report.read_text())
    passed = [t for t, s in data["original"]["status"].items() if s == "passed"]
    assert len(passed) >= 100 and data["regressions"] == [] and data["not_run"] == []
    # Tests that need an accelerator run on the emulated NPU (they are skipped on the CPU original).
    assert any(
        data["migrated"]["status"][t] == "passed"
        for t, s in data["original"]["status"].items()
        if s == "skipped"
    )
