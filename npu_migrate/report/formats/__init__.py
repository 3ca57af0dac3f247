"""Output formats, one module each behind this registry: a format is a `write(console, report)`
function. Nothing else in the tool knows about formats."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from npu_migrate.model import FileOutcome
from npu_migrate.report.anchor import anchored
from npu_migrate.report.fingerprint import fingerprints
from npu_migrate.report.gate import FailOn
from npu_migrate.report.summary import Summary

if TYPE_CHECKING:
    from npu_migrate.rules.schema import Rule


@dataclass(frozen=True)
class Report:
    """What a run found, for a format to write."""

    outcomes: list[FileOutcome]
    summary: Summary
    rules: Callable[[], Mapping[str, Rule]]  # by code, loaded when a format asks (SARIF's descriptions)
    repository: Callable[[], Path]  # the root a CI system's paths start from (report.anchor), when asked
    fail_on: FailOn = FailOn.warning  # which findings fail the gate (JUnit's failures)
    quiet: bool = False  # the text report without its summary (--quiet)

    @cached_property
    def root(self) -> Path:
        return self.repository()

    @cached_property
    def fingerprints(self) -> dict[int, str]:
        """Each finding's fingerprint by id(): computed once for every format of the run."""
        return fingerprints(self.outcomes, self.root)

    def path(self, file: Path | str, root: str | None = None) -> str:
        """A file as a CI system names it: from `root` (a CI variable's value, where set), else
        from the repository's root."""
        return anchored(file, Path(root) if root else self.root)


Writer = Callable[[Console, Report], None]


def _formats() -> dict[str, Writer]:
    from npu_migrate.report.formats import csv, github, gitlab, json, junit, sarif, text

    return {
        "text": text.write,
        "json": json.write,
        "sarif": sarif.write,
        "github": github.write,
        "gitlab": gitlab.write,
        "junit": junit.write,
        "csv": csv.write,
    }


FORMATS = _formats()
