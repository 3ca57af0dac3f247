"""The gate a CI lint step reads: which findings fail a run (`--fail-on`), and the exit code with
the one line that says what it means. A finding fails by its rule's severity, the one scale every
format maps from: `error` is CUDA-only code that fails or is wrong on an NPU, `warning` CUDA-specific
code that needs a look, `info` device-agnostic code (a fused-operator suggestion, a note) that runs
as it is. By default suggestions never fail: a migrated repository, or a new file using AdamW or
SDPA, passes."""

from __future__ import annotations

from enum import Enum

from npu_migrate.model import Finding, Severity
from npu_migrate.report.summary import Summary

EXIT_PASS, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
RANK = {Severity.info: 0, Severity.warning: 1, Severity.error: 2}


class FailOn(str, Enum):
    """The least severe finding that fails the gate."""

    error = "error"  # only CUDA-only code
    warning = "warning"  # every CUDA-specific finding: error and warning
    info = "info"  # every finding, suggestions and notes as well

    def fails(self, finding: Finding) -> bool:
        return not finding.applied and RANK[finding.rule.severity] >= RANK[Severity(self.value)]


def verdict(
    findings: list[Finding], fail_on: FailOn, exit_zero: bool, failed: str = "", unread: int = 0
) -> tuple[int, str]:
    """The exit code and its meaning, in a line: `failed` names a tool or option error (exit 2);
    a file the tool could not read (`unread`) fails like a finding: what it holds is unknown."""
    if failed:
        return EXIT_ERROR, f"exit 2: {failed}"
    failing = sum(fail_on.fails(f) for f in findings)
    below = sum(not f.applied for f in findings) - failing
    below_it = f"; {below} below it, which do not fail" if below else ""
    not_read = f"; {unread} file(s) not read" if unread else ""
    if not failing and not unread:
        return EXIT_PASS, f"exit 0: nothing at or above --fail-on {fail_on.value}{below_it}"
    what = f"{failing} finding(s) at or above --fail-on {fail_on.value}{not_read}{below_it}"
    if exit_zero:
        return EXIT_PASS, f"exit 0 (--exit-zero): {what}"
    return EXIT_FINDINGS, f"exit 1: {what}"


def tool_failure(summary: Summary) -> str:
    """Why a run checked less than it was asked to, or nothing: files the tool failed on, or every
    file skipped."""
    if summary.errors:
        return f"{len(summary.errors)} file(s) the tool failed on (left untouched)"
    if summary.nothing_read:
        return f"nothing was read: every file was skipped ({summary.why_nothing_read()})"
    return ""
