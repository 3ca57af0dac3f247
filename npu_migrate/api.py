"""What scan and apply share: run the rules over discovered files, one outcome per file."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from npu_migrate.engine import SourceResult, migrate_source
from npu_migrate.files import SourceFile
from npu_migrate.index import RuleIndex
from npu_migrate.ruleset import Applicability


@dataclass(frozen=True)
class FileOutcome:
    file: SourceFile
    result: SourceResult

    @property
    def changed(self) -> bool:
        return self.result.new_source is not None


def run_rules(
    files: list[SourceFile],
    index: RuleIndex,
    enabled: frozenset[Applicability],
    advance: Callable[[], None] = lambda: None,
) -> list[FileOutcome]:
    outcomes = []
    for file in files:
        outcomes.append(FileOutcome(file, _migrate(file, index, enabled)))
        advance()
    return outcomes


def _migrate(file: SourceFile, index: RuleIndex, enabled: frozenset[Applicability]) -> SourceResult:
    """One file's result; a failure inside the engine is that file's error, not the run's."""
    if file.data is None:
        return SourceResult()
    try:
        return migrate_source(file.data, index, enabled)
    except Exception as exc:  # an engine bug must not cost the user the other files
        return SourceResult(error=f"internal error, file left untouched: {type(exc).__name__}: {exc}")
