"""The change list's columns (Ascend's migration tool's), one row per finding and edit."""

from __future__ import annotations

import csv

from rich.console import Console

from npu_migrate.report.changes import CHANGE_LIST_COLUMNS, change_rows
from npu_migrate.report.formats import Report


def write(console: Console, report: Report) -> None:
    writer = csv.DictWriter(
        console.file, fieldnames=CHANGE_LIST_COLUMNS, extrasaction="ignore", lineterminator="\n"
    )
    writer.writeheader()
    writer.writerows(change_rows(report.outcomes))
