"""The change list: every edit and every finding left, per file and line, in the columns of
Ascend's own migration tool (CSV), with a JSON twin."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import IO, Any

from npu_migrate.model import FileOutcome, Finding
from npu_migrate.report.summary import label, message
from npu_migrate.write import write_output

CHANGE_LIST_COLUMNS = ["File", "Start Line", "End Line", "Operation Type", "Message"]


def change_rows(outcomes: list[FileOutcome], not_written: dict[str, str] | None = None) -> list[dict]:
    """Every edit and every finding left; a file that was not written has one row saying why,
    and its findings read as not applied."""
    rows = []
    for outcome in outcomes:
        display = outcome.file.display
        why = (not_written or {}).get(display)
        if why is not None:
            rows.append(_row(display, 1, 1, "UNSUPPORTED", f"not written: {why}", None))
            for finding in outcome.result.findings:
                rows.append(
                    _row(display, finding.line, finding.end_line, "UNSUPPORTED", message(finding), finding)
                )
            continue
        for line, module in outcome.result.added_imports:
            rows.append(_row(display, line, line, "INSERT", f"import {module}", None))
        for line, name in outcome.result.added_helpers:
            rows.append(
                _row(display, line, line, "INSERT", f"def {name}(...): a helper the fixes below call", None)
            )
        for line, name in outcome.result.removed_imports:
            rows.append(_row(display, line, line, "DELETE", f"unused import of {name}", None))
        for finding in outcome.result.findings:
            kind, text = _operation(finding)
            if finding.cell:  # a notebook's lines are the cell's
                text = f"cell {finding.cell}: {text}"
            rows.append(_row(display, finding.line, finding.end_line, kind, text, finding))
    return sorted(rows, key=lambda r: (r["File"], r["Start Line"]))


def _operation(finding: Finding) -> tuple[str, str]:
    """The operation type and message of a finding's row."""
    kind = label(finding)
    if finding.applied:
        return "MODIFY", f"{message(finding)} → {finding.replacement}"
    if finding.held:
        return "UNSUPPORTED", f"{message(finding)} (fix held back: {finding.held.why})"
    if kind == "unsafe":
        return "UNSUPPORTED", f"{message(finding)} (unsafe fix not applied: use --unsafe)"
    if kind == "note":
        return "NOTE", message(finding)
    return "UNSUPPORTED", message(finding)


def _row(display: str, start: int, end: int, kind: str, text: str, finding: Finding | None) -> dict:
    row = {
        "File": display,
        "Start Line": start,
        "End Line": end,
        "Operation Type": kind,
        "Message": text,
    }
    if finding is not None:
        row["Rule"] = finding.rule.code
    return row


def write_change_list(
    path: Path, outcomes: list[FileOutcome], not_written: dict[str, str] | None = None
) -> tuple[Path, Path]:
    rows = change_rows(outcomes, not_written)
    buffer = io.StringIO()
    write_csv(buffer, rows)
    csv_path = path.with_suffix(".csv")
    json_path = path.with_suffix(".json")
    write_output(csv_path, buffer.getvalue().encode("utf-8"))
    write_output(json_path, (json.dumps(rows, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
    return csv_path, json_path


# A cell a spreadsheet would read as a formula (`=HYPERLINK(...)` as a file name or a matched
# line): written after a quote, as OWASP's CSV-injection guidance says, so it is shown as text.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def write_csv(stream: IO[str], rows: list[dict]) -> None:
    """The change list's rows as CSV, no cell read as a formula."""
    writer = csv.DictWriter(
        stream, fieldnames=CHANGE_LIST_COLUMNS, extrasaction="ignore", lineterminator="\n"
    )
    writer.writeheader()
    writer.writerows({key: _as_text(value) for key, value in row.items()} for row in rows)


def _as_text(value: Any) -> Any:
    return "'" + value if isinstance(value, str) and value.startswith(_FORMULA_START) else value
