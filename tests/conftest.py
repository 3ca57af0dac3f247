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


@pytest.fixture(autouse=True, scope="session")
def _private_result_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The tests' CLI runs cache their results in a folder of their own, never the user's."""
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache-home"))


@pytest.fixture
def cli() -> Cli:
    return Cli()
