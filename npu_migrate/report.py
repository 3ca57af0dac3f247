"""Everything a run tells the user: findings, the summary, the change list, diffs."""

from __future__ import annotations

import csv
import difflib
import io
import json
import tokenize
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from npu_migrate.api import FileOutcome
from npu_migrate.files import write_atomic
from npu_migrate.rewriter import Finding
from npu_migrate.ruleset import Applicability, Severity

CHANGE_LIST_COLUMNS = ["File", "Start Line", "End Line", "Operation Type", "Message"]


def message(finding: Finding) -> str:
    return finding.rule.message.replace("{match}", finding.code.splitlines()[0] if finding.code else "")


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
    skipped: list[tuple[str, str]]
    errors: list[tuple[str, str]]

    @property
    def manual(self) -> int:
        return self.findings - self.automatic - self.opt_in - self.notes

    @property
    def automatic_share(self) -> float:
        return self.automatic / self.findings if self.findings else 1.0

    @classmethod
    def of(cls, outcomes: list[FileOutcome]) -> Summary:
        by_category: dict[str, Counter[str]] = {}
        manual: Counter[str] = Counter()
        automatic = opt_in = notes = total = 0
        for outcome in outcomes:
            for finding in outcome.result.findings:
                total += 1
                rule = finding.rule
                by_category.setdefault(rule.category, Counter())[rule.applicability.value] += 1
                fixable = finding.replacement is not None
                automatic += fixable and rule.applicability is Applicability.safe
                opt_in += fixable and rule.applicability is Applicability.unsafe
                if not fixable and rule.severity is Severity.info:
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
            errors=[(o.file.display, o.result.error) for o in outcomes if o.result.error],
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
            "errors": [{"file": f, "error": e} for f, e in self.errors],
        }


def finding_dict(display: str, finding: Finding) -> dict:
    rule = finding.rule
    return {
        "file": display,
        "line": finding.line,
        "column": finding.column,
        "end_line": finding.end_line,
        "code": rule.code,
        "name": rule.name,
        "category": rule.category,
        "severity": rule.severity.value,
        "applicability": rule.applicability.value,
        "message": message(finding),
        "original": finding.code,
        "replacement": finding.replacement,
        "applied": finding.applied,
    }


def all_findings(outcomes: list[FileOutcome]) -> list[tuple[str, Finding]]:
    return [(o.file.display, f) for o in outcomes for f in o.result.findings]


def print_findings(console: Console, findings: list[tuple[str, Finding]]) -> None:
    for display, finding in findings:
        rule = finding.rule
        where = f"{display}:{finding.line}:{finding.column}"
        fix = rule.applicability.value if finding.replacement is not None else "manual"
        line = f"[bold]{where}[/]: [cyan]{rule.code}[/] [dim]\\[{fix}][/] {escape(message(finding))}"
        if finding.replacement is not None:
            line += f" [green]→ {escape(finding.replacement.splitlines()[0])}[/]"
        console.print(line)


def print_problems(console: Console, summary: Summary) -> None:
    """Files that could not be parsed, and files skipped on purpose."""
    for display, error in summary.errors:
        console.print(f"[red]error[/] {display}: {escape(error)} (file left untouched)")
    for display, reason in summary.skipped:
        console.print(f"[yellow]skipped[/] {display}: {reason}")


def print_summary(console: Console, summary: Summary) -> None:
    print_problems(console, summary)
    if not summary.findings:
        console.print(f"No CUDA-specific code found in {summary.files} file(s).")
        return
    table = Table(title="CUDA touchpoints by category", title_justify="left")
    table.add_column("category")
    for column in ("safe", "unsafe", "manual", "total"):
        table.add_column(column, justify="right")
    for category, counts in summary.by_category.items():
        values = [counts.get(k, 0) for k in ("safe", "unsafe", "manual")]
        table.add_row(category, *map(str, values), str(sum(values)))
    console.print(table)
    console.print(
        f"{summary.findings} finding(s) in {summary.files_with_findings} of {summary.files} file(s): "
        f"{summary.automatic} migrate automatically ({summary.automatic_share:.0%}), "
        f"{summary.opt_in} more with --unsafe, "
        f"{summary.manual} need a human, {summary.notes} note(s).",
    )
    if summary.manual_by_file:
        console.print(
            "Most manual work: " + ", ".join(f"{f} ({n})" for f, n in summary.manual_by_file[:5]),
        )


def change_rows(outcomes: list[FileOutcome]) -> list[dict]:
    rows = []
    for outcome in outcomes:
        display = outcome.file.display
        for line, module in outcome.result.added_imports:
            rows.append(_row(display, line, line, "INSERT", f"import {module}", None))
        for line, name in outcome.result.removed_imports:
            rows.append(_row(display, line, line, "DELETE", f"unused import of {name}", None))
        for finding in outcome.result.findings:
            if finding.applied:
                kind, text = "MODIFY", f"{message(finding)} → {finding.replacement}"
            elif finding.replacement is not None:
                kind, text = "UNSUPPORTED", f"{message(finding)} (unsafe fix not applied: use --unsafe)"
            else:
                kind, text = "UNSUPPORTED", message(finding)
            rows.append(_row(display, finding.line, finding.end_line, kind, text, finding))
    return sorted(rows, key=lambda r: (r["File"], r["Start Line"]))


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


def write_change_list(path: Path, outcomes: list[FileOutcome]) -> tuple[Path, Path]:
    rows = change_rows(outcomes)
    buffer = io.StringIO()
    writer = csv.DictWriter(
        buffer, fieldnames=CHANGE_LIST_COLUMNS, extrasaction="ignore", lineterminator="\n"
    )
    writer.writeheader()
    writer.writerows(rows)
    csv_path = path.with_suffix(".csv")
    json_path = path.with_suffix(".json")
    write_atomic(csv_path, buffer.getvalue().encode("utf-8"))
    write_atomic(json_path, (json.dumps(rows, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
    return csv_path, json_path


def _lines(data: bytes) -> list[str]:
    """Source bytes as lines, decoded the way Python would (coding line, BOM)."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding, errors="replace").splitlines(keepends=True)


def unified_diff(outcome: FileOutcome) -> str:
    old = _lines(outcome.file.data or b"")
    new = _lines(outcome.result.new_source or b"")
    name = outcome.file.display
    sep = "" if name.startswith("/") else "/"
    return "".join(difflib.unified_diff(old, new, f"a{sep}{name}", f"b{sep}{name}"))
