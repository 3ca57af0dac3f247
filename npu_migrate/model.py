"""The data every stage shares: a file as discovered, what the rules found in it, and what a run
did to it. Plain data only, so reports, caches and tests need no engine to read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from npu_migrate.rules.schema import Rule


@dataclass(frozen=True)
class SourceFile:
    path: Path  # where to read it
    display: str  # how to name it in reports: relative to the root it was found under
    data: bytes | None = None  # None: skipped
    skipped: str | None = None  # why it was skipped


@dataclass(frozen=True)
class Finding:
    rule: Rule
    line: int
    column: int
    end_line: int
    code: str
    replacement: str | None  # the fixed code; None when the rule is report-only
    applied: bool


@dataclass
class FileResult:
    """What the rules found in (and, for the enabled fixes, did to) one file's bytes."""

    findings: list[Finding] = field(default_factory=list)
    added_imports: list[tuple[int, str]] = field(default_factory=list)  # (line, module)
    removed_imports: list[tuple[int, str]] = field(default_factory=list)  # (line, qualified name)
    overridden: list[str] = field(default_factory=list)  # codes of catalog findings a user rule replaced
    new_source: bytes | None = None  # None: unchanged
    error: str | None = None  # set when the file could not be parsed


@dataclass(frozen=True)
class FileOutcome:
    file: SourceFile
    result: FileResult

    @property
    def changed(self) -> bool:
        return self.result.new_source is not None
