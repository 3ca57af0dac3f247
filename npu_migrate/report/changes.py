"""The change list: every edit and every finding left, per file and line, in the columns of
Ascend's own migration tool (CSV), with a JSON twin."""

from __future__ import annotations

import codecs
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
    """What is at the change list's path that apply must not write over, and why."""


_HEADER = (",".join(CHANGE_LIST_COLUMNS) + "\n").encode()


def read_change_list(path: Path, tree: str) -> list[dict] | None:
    """The rows an earlier run of `tree` left in the change list at `path` (.csv, and its .json
    twin, which keeps each row's rule, run and tree), to merge this run's with; None where there is
    none (no file, an empty one, or what is no regular file: a FIFO, /dev/null). Whatever a write
    there would lose is a ChangeListError: a folder, a file of the user's, a list the user edited
    (the CSV no longer the one its twin makes), another tree's list."""
    csv_path, json_path = path.with_suffix(".csv"), path.with_suffix(".json")
    try:
        if path not in (csv_path, json_path) and _held(path) is not None:  # `--change-list train.py`
            raise ChangeListError(f"{path}: a file that is no change list")
        table, twin = _held(csv_path), _held(json_path)
        if table is None:
            if twin is not None:
                raise ChangeListError(f"{json_path}: a file that is no change list (no {csv_path.name})")
            return None
        with csv_path.open("rb") as handle:
            header = handle.readline(len(_HEADER) + 1)  # a huge or binary file is not read whole
        if not header.removeprefix(codecs.BOM_UTF8).startswith(_HEADER[:-1]):  # edited, if it does
            raise ChangeListError(f"{csv_path}: a file that is no change list")
        rows = _twin_rows(json_path) if twin is not None else None
        if rows is None or table != len(made := _csv_bytes(rows)) or csv_path.read_bytes() != made:
            raise ChangeListError(
                f"{csv_path}: edited since npu-migrate wrote it (or its twin {json_path.name} is "
                "missing or changed); move it aside to keep it"
            )
    except OSError as exc:
        raise ChangeListError(f"{exc.filename or csv_path}: {exc.strerror or exc}") from exc
    other = {row.get("Tree") for row in rows} - {tree}
    if other:
        earlier = other.pop() or "no tree (an older npu-migrate wrote it)"
        raise ChangeListError(f"{csv_path}: the change list of {earlier}, not of {tree}")
    return rows


def _held(path: Path) -> int | None:
    """The size of the regular file at `path`, or None where there is none, or an empty one, or
    what is written into as it is (not a regular file, nor a folder, which is a ChangeListError)."""
    if path.is_dir():
        raise ChangeListError(f"{path}: a folder is there")
    if not path.is_file():
        return None
    return path.stat().st_size or None


def _twin_rows(json_path: Path) -> list[dict] | None:
    """The rows of the JSON twin, or None where it holds something else."""
    try:
        records = json.loads(json_path.read_bytes())
    except (ValueError, UnicodeDecodeError):
        return None
    rows = [_as_row(record) for record in records] if isinstance(records, list) else [None]
    return [row for row in rows if row] if all(rows) else None


def _as_row(record: Any) -> dict | None:
    """A row of the JSON twin read back, or None where it is not one."""
    if not isinstance(record, dict):
        return None
    texts = all(isinstance(record.get(key), str) for key in ("File", "Operation Type"))
    numbers = all(type(record.get(key)) is int for key in ("Start Line", "End Line", "Run"))
    return record if texts and numbers and record["Run"] > 0 else None


def merged(earlier: list[dict], rows: list[dict], read: set[str], tree: str) -> tuple[list[dict], int]:
    """This run's rows over an earlier run's, and how many of those are kept: the record of the
    migration keeps every edit an earlier run made (MODIFY, INSERT, DELETE); what an earlier run
    listed as left (UNSUPPORTED, TO MODIFY, SUGGESTION, NOTE) is replaced, in each file this run
    read, by what this run leaves. Each row says which run wrote it (`Run`, from 1) and the tree
    that run migrated (`Tree`); an edit this run lists again replaces the earlier row of it."""
    run = 1 + max((row["Run"] for row in earlier), default=0)
    new = [{**row, "Run": run, "Tree": tree} for row in rows]
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
    tree: str,
    outcomes: list[FileOutcome],
    not_written: dict[str, str] | None = None,
    earlier: list[dict] | None = None,
) -> tuple[int, int]:
    """Write this run's change list of `tree`, merged with an `earlier` one's rows (see `merged`):
    how many rows it holds, and how many of them an earlier run wrote."""
    read = {o.file.display for o in outcomes if o.file.data is not None}
    rows, kept = merged(earlier or [], change_rows(outcomes, not_written), read, tree)
    write_output(path.with_suffix(".csv"), _csv_bytes(rows))
    json_text = json.dumps(rows, indent=2, ensure_ascii=False) + "\n"
    write_output(path.with_suffix(".json"), json_text.encode("utf-8"))
    return len(rows), kept


def _csv_bytes(rows: list[dict]) -> bytes:
    """The CSV of `rows`, as written: what an unedited list holds, byte for byte."""
    buffer = io.StringIO()
    write_csv(buffer, rows)
    return buffer.getvalue().encode("utf-8")


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
