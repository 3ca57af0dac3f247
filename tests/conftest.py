"""Shared helpers: run the real CLI in-process (typer's runner) against files on disk."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from npu_migrate.cli import app

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


class Cli:
    def __init__(self) -> None:
        self.runner = CliRunner()

    def __call__(self, *args: str | Path):
        result = self.runner.invoke(app, [str(a) for a in args], catch_exceptions=False)
        return result


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one worker more than the CPUs. Most of the suite's time goes to verify's side
    processes, which wait on each other and on torch's import: a third worker on two cores took
    the verify tests from 355 s to 313 s (with --dist worksteal)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cpus + 1


SLOW_TESTS = Path(__file__).with_name("slow_tests.txt")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests slow_tests.txt names are marked `slow` (the default run leaves them out)."""
    lines = (line.split("#", 1)[0].strip() for line in SLOW_TESTS.read_text().splitlines())
    slow = {line for line in lines if line}
    for item in items:
        if item.nodeid in slow:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True, scope="session")
def _private_result_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The tests' CLI runs cache their results in a folder of their own, never the user's."""
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache-home"))


@pytest.fixture
def cli() -> Cli:
    return Cli()
