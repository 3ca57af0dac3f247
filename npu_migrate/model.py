"""The data every stage shares: a file as discovered, what the rules found in it, and what a run
did to it. Plain data only, so reports, caches and tests need no engine to read it."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any


class Applicability(str, Enum):
    safe = "safe"  # exact equivalent: applied by default
    unsafe = "unsafe"  # may change behaviour: applied only with --unsafe
    manual = "manual"  # report only: a human must act


class Severity(str, Enum):
    error = "error"
    warning = "warning"
    info = "info"


@dataclass(frozen=True)
class RuleInfo:
    """What a report needs to know of the rule behind a finding."""

    code: str
    name: str
    category: str
    severity: Severity
    applicability: Applicability
    message: str  # the finding's text; {match} is the matched code


@dataclass(frozen=True)
class ModulePath:
    """Where a file sits among Python packages, for names its relative imports and its own
    top-level definitions stand for: `transformers/utils/import_utils.py` is the module
    transformers.utils.import_utils of the package transformers.utils."""

    name: str = ""  # the module's dotted name; "" outside any package
    package: str = ""  # what its relative imports start from; "" outside any package
    # The modules beside it named for other devices, when it is named for CUDA: the CUDA member
    # of a family of per-device implementations (Lightning's accelerators/cuda.py beside cpu.py,
    # mps.py and xla.py); "" otherwise.
    cuda_member_beside: str = ""
    # Dotted names other files of the run keep calling, with where (engine.program.run): a mock
    # of one here must keep its name. Known after the run's first pass only.
    kept_elsewhere: tuple[tuple[str, str], ...] = ()
    # Attribute names other files of the run keep comparing with CUDA, with where: a value handed
    # on under that name keeps its CUDA. Known after the run's first pass only.
    compared_elsewhere: tuple[tuple[str, str], ...] = ()
    # Words a rule's fix is held for (Rule.hold_in_files_with) that other files of the run
    # mention, with where: the program, not only this file, shows what the fix cannot take (a
    # trainer elsewhere calls `zero_grad(set_to_none=True)`). Known before the first pass, for
    # the files that may make such a fix.
    words_elsewhere: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> bytes:
        """What results depend on, for the result cache."""
        facts = (self.cuda_member_beside, self.kept_elsewhere, self.compared_elsewhere, self.words_elsewhere)
        return f"{self.name}\0{self.package}\0{facts}".encode()


NO_MODULE = ModulePath()  # a file outside any package


@dataclass(frozen=True)
class SourceFile:
    path: Path  # where to read it (a link named on the command line: its target)
    display: str  # how to name it in reports: relative to the root it was found under, printable
    data: bytes | None = None  # None: skipped
    skipped: str | None = None  # why it was skipped
    stat: os.stat_result | None = None  # as read: a file that changes before it is written is refused
    module: ModulePath = NO_MODULE  # where it sits among packages


@dataclass(frozen=True)
class Hold:
    """Why a rule's fix is held back at one place: `reason`, the kind of hold that summaries
    count (a reviewer sees what was not done, and why, at a glance), and `why`, in this place's
    words."""

    reason: str
    why: str

    def detailed(self, more: str) -> Hold:
        return Hold(self.reason, f"{self.why}: {more}")


@dataclass(frozen=True)
class Finding:
    rule: RuleInfo
    line: int
    column: int
    end_line: int
    end_column: int  # 1-based, exclusive: the column just after the matched code
    code: str
    replacement: str | None  # the fixed code; None when the rule is report-only, or held
    applied: bool
    held: Hold | None = None  # why the rule's fix is held back here: the code is kept as it is
    cell: int | None = None  # in a notebook: the cell (1-based, every cell counted); lines are the cell's
    detail: str | None = None  # what this finding adds to its rule's message (where an operator is called)


@dataclass
class FileResult:
    """What the rules found in (and, for the enabled fixes, did to) one file's bytes."""

    findings: list[Finding] = field(default_factory=list)
    added_imports: list[tuple[int, str]] = field(default_factory=list)  # (line, module)
    removed_imports: list[tuple[int, str]] = field(default_factory=list)  # (line, qualified name)
    added_helpers: list[tuple[int, str]] = field(default_factory=list)  # (line, function name)
    overridden: list[str] = field(default_factory=list)  # codes of catalog findings a user rule replaced
    suppressed: int = 0  # findings a suppression comment silenced (neither reported nor fixed)
    unused_suppressions: list[int] = field(default_factory=list)  # lines of comments that silenced nothing
    # The attributes the file keeps comparing with CUDA: (name, line, the comparison), which
    # other files of the run read (engine.program.run.kept_comparisons).
    cuda_comparisons: list[tuple[str, int, str]] = field(default_factory=list)
    new_source: bytes | None = None  # None: unchanged
    error: str | None = None  # why the file was not read (not parsed, or the tool failed on it)
    tool_failed: bool = False  # the error is the tool's or a rule's (a fix that breaks code), not the input's
    skipped: str | None = None  # the handler's reason to leave the file unread (a notebook in R)

    @classmethod
    def undecodable(cls, data: bytes, exc: UnicodeDecodeError) -> FileResult:
        """A file that does not decode, left alone: the line it fails at, and why."""
        line = data.count(b"\n", 0, exc.start) + 1
        return cls(error=f"line {line}: cannot decode as {exc.encoding}: {exc.reason}")

    def to_json(self) -> dict[str, Any]:
        """A plain-JSON form (for the result cache); `from_json` reads it back unchanged."""
        data = asdict(self)
        data["new_source"] = None if self.new_source is None else self.new_source.decode("latin-1")
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FileResult:
        findings = []
        for finding in data["findings"]:
            rule = finding["rule"]
            info = RuleInfo(
                **{
                    **rule,
                    "severity": Severity(rule["severity"]),
                    "applicability": Applicability(rule["applicability"]),
                }
            )
            held = finding["held"]
            findings.append(Finding(**{**finding, "rule": info, "held": held and Hold(**held)}))
        new_source = data["new_source"]
        return cls(
            findings=findings,
            added_imports=[(line, name) for line, name in data["added_imports"]],
            removed_imports=[(line, name) for line, name in data["removed_imports"]],
            added_helpers=[(line, name) for line, name in data["added_helpers"]],
            overridden=data["overridden"],
            suppressed=data["suppressed"],
            unused_suppressions=data["unused_suppressions"],
            cuda_comparisons=[(name, line, text) for name, line, text in data["cuda_comparisons"]],
            new_source=None if new_source is None else new_source.encode("latin-1"),
            error=data["error"],
            skipped=data["skipped"],
        )


@dataclass(frozen=True)
class FileOutcome:
    file: SourceFile
    result: FileResult

    @property
    def changed(self) -> bool:
        return self.result.new_source is not None
