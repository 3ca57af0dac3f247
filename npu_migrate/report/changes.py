"""The change list: every edit and every finding left, per file and line, in the columns of
Ascend's own migration tool (CSV), with a JSON twin."""

from __future__ import annotations

import contextlib
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
    """The operation type and message of a finding's row: MODIFY an edit made, TO MODIFY the
    edit a default apply makes (a scan's safe fix), SUGGESTION a fix apply makes only with
    --unsafe, UNSUPPORTED what a human must do (a held fix among it), NOTE nothing to do."""
    kind = label(finding)
    if finding.applied:
        return "MODIFY", f"{message(finding)} → {finding.replacement}"
    if finding.held:
        return "UNSUPPORTED", f"{message(finding)} (fix held back: {finding.held.why})"
    if kind == "safe":
        return "TO MODIFY", f"{message(finding)} → {_first_line(finding)} (apply makes this edit)"
    if kind == "unsafe":
        return "SUGGESTION", f"{message(finding)} → {_first_line(finding)} (unsafe fix: use --unsafe)"
    if kind == "note":
        return "NOTE", message(finding)
    return "UNSUPPORTED", message(finding)


def _first_line(finding: Finding) -> str:
    """The fix not made, as the text report shows it: its first line."""
    lines = (finding.replacement or "").splitlines() or [""]
    return lines[0] + (" …" if len(lines) > 1 else "")


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


EDITS = frozenset({"MODIFY", "INSERT", "DELETE"})  # what a run did; the other types say what is left


class ChangeListError(Exception):
    """An earlier change list that cannot be read back (not one npu-migrate wrote)."""


def read_change_list(path: Path) -> list[dict] | None:
    """The rows of the change list at `path` (its .json twin, which keeps each row's rule and run,
    else the .csv), or None where there is none, or an empty one."""
    csv_path, json_path = path.with_suffix(".csv"), path.with_suffix(".json")
    if not csv_path.is_file() or not csv_path.stat().st_size:
        return None
    try:
        if json_path.is_file():
            with contextlib.suppress(ValueError):
                records = json.loads(json_path.read_text(encoding="utf-8"))
                rows = [_as_row(record) for record in records] if isinstance(records, list) else [None]
                if all(rows):
                    return [row for row in rows if row]
        with csv_path.open(encoding="utf-8", newline="") as handle:
            reader = csv.DictReader(handle)
            if reader.fieldnames != CHANGE_LIST_COLUMNS:
                raise ChangeListError("its columns are not the change list's")
            rows = [_as_row({key: _from_text(value) for key, value in record.items()}) for record in reader]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ChangeListError(getattr(exc, "strerror", None) or str(exc)) from exc
    if not all(rows):
        raise ChangeListError("a line of it is not a change-list row")
    return [row for row in rows if row]


def _as_row(record: Any) -> dict | None:
    """A row read back (its line numbers as numbers, its run 1 where it names none: a CSV's, or
    one an older npu-migrate wrote), or None where it is not one."""
    if not isinstance(record, dict) or not all(
        isinstance(record.get(k), str) for k in ("File", "Operation Type")
    ):
        return None
    lines = {key: record.get(key) for key in ("Start Line", "End Line")}
    lines = {key: int(v) if isinstance(v, str) and v.isdigit() else v for key, v in lines.items()}
    if not all(isinstance(v, int) for v in lines.values()):
        return None
    run = record.get("Run")
    return {**record, **lines, "Run": run if isinstance(run, int) and run > 0 else 1}


def merged(earlier: list[dict], rows: list[dict], read: set[str]) -> tuple[list[dict], int]:
    """This run's rows over an earlier run's, and how many of those are kept: the record of the
    migration keeps every edit an earlier run made (MODIFY, INSERT, DELETE); what an earlier run
    listed as left (UNSUPPORTED, TO MODIFY, SUGGESTION, NOTE) is replaced, in each file this run
    read, by what this run leaves. Each row says which run wrote it (`Run`, from 1); an edit this
    run lists again replaces the earlier row of it."""
    run = 1 + max((row["Run"] for row in earlier), default=0)
    new = [{**row, "Run": run} for row in rows]
    again = {_key(row) for row in new if row["Operation Type"] in EDITS}
    kept = [
        row
        for row in earlier
        if (row["Operation Type"] in EDITS and _key(row) not in again)
        or (row["Operation Type"] not in EDITS and row["File"] not in read)
    ]
    combined = kept + new
    return sorted(combined, key=lambda r: (r["File"], r["Start Line"], r["Run"])), len(kept)


def _key(row: dict) -> tuple:
    return tuple(row.get(column) for column in CHANGE_LIST_COLUMNS)


def write_change_list(
    path: Path,
    outcomes: list[FileOutcome],
    not_written: dict[str, str] | None = None,
    earlier: list[dict] | None = None,
) -> tuple[int, int]:
    """Write this run's change list, merged with an `earlier` one's rows (see `merged`): how
    many rows it holds, and how many of them an earlier run wrote."""
    read = {o.file.display for o in outcomes if o.file.data is not None}
    rows, kept = merged(earlier or [], change_rows(outcomes, not_written), read)
    buffer = io.StringIO()
    write_csv(buffer, rows)
    csv_path = path.with_suffix(".csv")
    json_path = path.with_suffix(".json")
    write_output(csv_path, buffer.getvalue().encode("utf-8"))
    write_output(json_path, (json.dumps(rows, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
    return len(rows), kept


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


def _from_text(value: Any) -> Any:
    """A cell as `_as_text` had it before it quoted a formula."""
    quoted = isinstance(value, str) and value.startswith("'") and value[1:].startswith(_FORMULA_START)
    return value[1:] if quoted else value
