"""GitHub Actions workflow commands: each finding an annotation on its lines in the pull request,
the file named from the repository's root (`GITHUB_WORKSPACE` where set), as GitHub shows it."""

from __future__ import annotations

import os

from rich.console import Console

from npu_migrate.model import Severity
from npu_migrate.report.formats import Report
from npu_migrate.report.summary import UNUSED, UNUSED_WHY, label, message

COMMAND = {Severity.error: "error", Severity.warning: "warning", Severity.info: "notice"}


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def write(console: Console, report: Report) -> None:
    workspace = os.environ.get("GITHUB_WORKSPACE")
    for outcome in report.outcomes:
        for f in outcome.result.findings:
            where = f"file={_property(report.path(outcome.file.path, workspace))}"
            if f.cell is None:  # a notebook's lines are its cells', not the file's: the file is annotated
                where += f",line={f.line},col={f.column},endLine={f.end_line},endColumn={f.end_column}"
            cell = f" cell {f.cell} line {f.line}" if f.cell else ""
            title = _property(f"{f.rule.code} [{label(f)}]{cell}")
            console.file.write(f"::{COMMAND[f.rule.severity]} {where},title={title}::{_data(message(f))}\n")
    for display, why in report.summary.unread + report.summary.errors:
        name = _property(report.path(display, workspace))
        console.file.write(f"::error file={name},title=not read::{_data(why)}\n")
    for display, line in report.summary.unused_suppressions:  # hygiene: a notice, never failing
        name = _property(report.path(display, workspace))
        console.file.write(f"::notice file={name},line={line},title={UNUSED}::{_data(UNUSED_WHY)}\n")
