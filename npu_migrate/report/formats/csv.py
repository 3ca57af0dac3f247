"""The change list's columns (Ascend's migration tool's), one row per finding and edit."""

from __future__ import annotations

from rich.console import Console

from npu_migrate.report.changes import change_rows, write_csv
from npu_migrate.report.formats import Report


def write(console: Console, report: Report) -> None:
    write_csv(console.file, change_rows(report.outcomes))
