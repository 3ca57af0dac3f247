"""The gate a CI lint step reads: which findings fail a run (`--fail-on`), and the exit code with
the one line that says what it means. Notes never fail: they say what is worth knowing, and a
migrated repository whose scan finds only notes passes."""

from __future__ import annotations

from enum import Enum

from npu_migrate.model import Finding, Severity
from npu_migrate.report.summary import Summary, label

EXIT_PASS, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


class FailOn(str, Enum):
    work = "work"  # every finding that still needs doing: all but notes and what apply did
    manual = "manual"  # only what a human must do: findings no fix handles, or whose fix is held
    error = "error"  # only findings of rules whose severity is error

    def fails(self, finding: Finding) -> bool:
        kind = label(finding)
        if kind == "note" or finding.applied:
            return False
        if self is FailOn.manual:
            return kind in ("manual", "held")
        if self is FailOn.error:
            return finding.rule.severity is Severity.error
        return True


def verdict(
    findings: list[Finding], fail_on: FailOn, exit_zero: bool, failed: str = "", unread: int = 0
) -> tuple[int, str]:
    """The exit code and its meaning, in a line: `failed` names a tool or option error (exit 2);
    a file the tool could not read (`unread`) fails like a finding: what it holds is unknown."""
    if failed:
        return EXIT_ERROR, f"exit 2: {failed}"
    failing = sum(fail_on.fails(f) for f in findings)
    notes = sum(label(f) == "note" for f in findings)
    noted = f"; {notes} note(s), which never fail" if notes else ""
    not_read = f"; {unread} file(s) not read" if unread else ""
    if not failing and not unread:
        return EXIT_PASS, f"exit 0: nothing at or above --fail-on {fail_on.value}{noted}"
    what = f"{failing} finding(s) at or above --fail-on {fail_on.value}{not_read}{noted}"
    if exit_zero:
        return EXIT_PASS, f"exit 0 (--exit-zero): {what}"
    return EXIT_FINDINGS, f"exit 1: {what}"


def tool_failure(summary: Summary) -> str:
    """Why a run checked less than it was asked to, or nothing: files the tool failed on, or every
    file skipped."""
    if summary.errors:
        return f"{len(summary.errors)} file(s) the tool failed on (left untouched)"
    if summary.nothing_read:
        return "nothing was read: every file was skipped"
    return ""
