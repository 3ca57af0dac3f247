"""What a run found, counted: by category and fix safety, the automatic share, the files with
the most manual work, and every finding as a plain record that output formats share."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from npu_migrate.discover import IGNORED, IGNORED_FOLDER, kind_of
from npu_migrate.engine.reasons import DUAL_PATH
from npu_migrate.model import Applicability, FileOutcome, Finding, Severity


def message(finding: Finding) -> str:
    text = finding.rule.message.replace("{match}", finding.code.splitlines()[0] if finding.code else "")
    return f"{text}; {finding.detail}" if finding.detail else text


def _by_file_kind(outcomes: list[FileOutcome]) -> dict[str, int]:
    return dict(Counter(kind_of(o.file) for o in outcomes for _ in o.result.findings))


def _hidden(outcome: FileOutcome) -> bool:
    """A file or folder .gitignore hid: counted, not listed."""
    return outcome.file.skipped in (IGNORED, IGNORED_FOLDER)


def location(finding: Finding) -> str:
    """`line:column`, or `cell N:line:column` in a notebook."""
    return (f"cell {finding.cell}:" if finding.cell else "") + f"{finding.line}:{finding.column}"


UNUSED = "unused-suppression"  # how machine formats name a suppression that suppressed nothing
UNUSED_WHY = "this suppression comment suppresses nothing; remove it"


def label(finding: Finding) -> str:
    """How reports label a finding: its fix's class (`safe`, `unsafe`), `held` (the rule has a fix
    that engine.holds kept from this code), `manual` (a human must act) or `note` (worth knowing,
    nothing to do)."""
    if finding.held:
        return "held"
    if finding.replacement is not None:
        return finding.rule.applicability.value
    return "note" if finding.rule.severity is Severity.info else "manual"


@dataclass(frozen=True)
class Summary:
    files: int
    files_with_findings: int
    findings: int
    by_category: dict[str, Counter[str]]
    automatic: int  # findings a default (safe) apply migrates
    opt_in: int  # findings an --unsafe apply migrates as well
    notes: int  # report-only findings of severity info: nothing to do, worth knowing
    manual_by_file: list[tuple[str, int]]
    skipped: list[tuple[str, str]]  # files not read, and why (but those .gitignore hides)
    ignored: Counter[str]  # "file"/"folder" -> how many .gitignore hid (and git does not track)
    errors: list[tuple[str, str]]  # files the tool failed on (an engine bug, a stalled worker)
    unread: list[tuple[str, str]]  # files whose input it could not read (not parsed), and why
    overridden: dict[str, int]  # catalog rule code -> findings a user rule replaced
    by_file_kind: dict[str, int]  # kind of file (python, notebook) -> findings
    suppressed: int  # findings silenced by suppression comments
    unused_suppressions: list[tuple[str, int]]  # (file, line) of comments that silenced nothing
    held_by_reason: list[tuple[str, int]]  # model.Hold.reason -> held findings, most first
    dual_path_files: list[str]  # files that already keep a path for the NPU beside CUDA
    not_reported: list[tuple[int, str]] = field(default_factory=list)  # (findings, why): baseline, diff

    @property
    def nothing_read(self) -> bool:
        """Files were named or found, and every one was skipped: the run checked nothing."""
        return bool(self.files or self.ignored) and len(self.skipped) == self.files

    def why_nothing_read(self, shown: int = 3) -> str:
        """Why every file was skipped, in a line: the files named under each reason (the first
        `shown` of them) and what .gitignore hid."""
        by_reason: dict[str, list[str]] = {}
        for display, reason in self.skipped:
            by_reason.setdefault(reason, []).append(display)
        parts = [
            ", ".join(files[:shown])
            + (f" and {len(files) - shown} more" if len(files) > shown else "")
            + f": {reason}"
            for reason, files in by_reason.items()
        ]
        if self.ignored:
            hidden = [f"{n} {kind}(s)" for kind, n in sorted(self.ignored.items()) if n]
            parts.append(f"{' and '.join(hidden)} {IGNORED}")
        return "; ".join(parts)

    @property
    def manual(self) -> int:
        return self.findings - self.automatic - self.opt_in - self.notes

    @property
    def automatic_share(self) -> float:
        return self.automatic / self.findings if self.findings else 1.0

    @classmethod
    def of(cls, outcomes: list[FileOutcome]) -> Summary:
        hidden = [o for o in outcomes if _hidden(o)]
        outcomes = [o for o in outcomes if not _hidden(o)]
        by_category: dict[str, Counter[str]] = {}
        manual: Counter[str] = Counter()
        overridden: Counter[str] = Counter()
        automatic = opt_in = notes = total = 0
        for outcome in outcomes:
            overridden.update(outcome.result.overridden)
            for finding in outcome.result.findings:
                total += 1
                rule = finding.rule
                fixable = finding.replacement is not None
                note = not fixable and rule.severity is Severity.info
                column = rule.applicability.value if fixable else "note" if note else "manual"
                by_category.setdefault(rule.category, Counter())[column] += 1
                automatic += fixable and rule.applicability is Applicability.safe
                opt_in += fixable and rule.applicability is Applicability.unsafe
                if note:
                    notes += 1
                elif not fixable:
                    manual[outcome.file.display] += 1
        return cls(
            files=len(outcomes),
            files_with_findings=sum(bool(o.result.findings) for o in outcomes),
            findings=total,
            by_category=dict(sorted(by_category.items())),
            automatic=automatic,
            opt_in=opt_in,
            notes=notes,
            manual_by_file=manual.most_common(10),
            skipped=[(o.file.display, o.file.skipped) for o in outcomes if o.file.skipped],
            ignored=Counter("folder" if o.file.skipped == IGNORED_FOLDER else "file" for o in hidden),
            errors=[
                (o.file.display, o.result.error) for o in outcomes if o.result.error and o.result.tool_failed
            ],
            unread=[
                (o.file.display, o.result.error)
                for o in outcomes
                if o.result.error and not o.result.tool_failed
            ],
            overridden=dict(sorted(overridden.items())),
            by_file_kind=_by_file_kind(outcomes),
            suppressed=sum(o.result.suppressed for o in outcomes),
            unused_suppressions=[(o.file.display, n) for o in outcomes for n in o.result.unused_suppressions],
            held_by_reason=Counter(
                f.held.reason for o in outcomes for f in o.result.findings if f.held
            ).most_common(),
            dual_path_files=[
                o.file.display
                for o in outcomes
                if any(f.held and f.held.reason == DUAL_PATH for f in o.result.findings)
            ],
        )

    def as_dict(self) -> dict:
        return {
            "files": self.files,
            "files_with_findings": self.files_with_findings,
            "findings": self.findings,
            "automatic": self.automatic,
            "opt_in_unsafe": self.opt_in,
            "manual": self.manual,
            "notes": self.notes,
            "automatic_share": round(self.automatic_share, 4),
            "by_category": {k: dict(v) for k, v in self.by_category.items()},
            "most_manual_work": [{"file": f, "manual": n} for f, n in self.manual_by_file],
            "skipped": [{"file": f, "reason": r} for f, r in self.skipped],
            "ignored_by_gitignore": {"files": self.ignored["file"], "folders": self.ignored["folder"]},
            "errors": [{"file": f, "error": e} for f, e in self.errors],
            "not_read": [{"file": f, "reason": r} for f, r in self.unread],
            "overridden": self.overridden,
            "by_file_kind": self.by_file_kind,
            "suppressed": self.suppressed,
            "unused_suppressions": [{"file": f, "line": n} for f, n in self.unused_suppressions],
            "held_by_reason": dict(self.held_by_reason),
            "dual_path_files": self.dual_path_files,
        }


def finding_dict(display: str, finding: Finding) -> dict:
    rule = finding.rule
    return {
        "file": display,
        "line": finding.line,
        "column": finding.column,
        "end_line": finding.end_line,
        "end_column": finding.end_column,
        "cell": finding.cell,
        "code": rule.code,
        "name": rule.name,
        "category": rule.category,
        "severity": rule.severity.value,
        "applicability": rule.applicability.value,
        "message": message(finding),
        "original": finding.code,
        "replacement": finding.replacement,
        "applied": finding.applied,
        "label": label(finding),
        "held": finding.held.why if finding.held else None,
        "held_reason": finding.held.reason if finding.held else None,
    }


def all_findings(outcomes: list[FileOutcome]) -> list[tuple[str, Finding]]:
    return [(o.file.display, f) for o in outcomes for f in o.result.findings]
