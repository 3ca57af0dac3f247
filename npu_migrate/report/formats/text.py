"""The terminal report: one line per finding, problems, and the summary table."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from npu_migrate.discover import IGNORED, printable
from npu_migrate.model import Finding
from npu_migrate.report.formats import Report
from npu_migrate.report.gate import FailOn
from npu_migrate.report.summary import UNUSED_WHY, Summary, all_findings, label, location, message

GATE_MARK = "✗"  # the mark on a finding that fails the gate (at or above --fail-on)


def write(console: Console, report: Report) -> None:
    print_findings(console, all_findings(report.outcomes), report.fail_on)
    if report.quiet:  # a hook's run, batch after batch: what to fix, nothing else
        print_unread(console, report.summary)
    else:
        print_summary(console, report.summary)


def print_findings(console: Console, findings: list[tuple[str, Finding]], fail_on: FailOn) -> None:
    """A line per finding; one that fails the gate (at or above --fail-on) ends in a red ✗."""
    for display, finding in findings:
        rule = finding.rule
        where = f"{display}:{location(finding)}"
        text = escape(printable(message(finding)))
        line = f"[bold]{where}[/]: [cyan]{rule.code}[/] [dim]\\[{label(finding)}][/] {text}"
        if finding.replacement is not None:
            line += f" [green]→ {escape(printable(finding.replacement.splitlines()[0]))}[/]"
        if finding.held:
            line += f" [yellow](fix held back: {escape(finding.held.why)})[/]"
        console.print(line + (f" [red]{GATE_MARK}[/]" if fail_on.fails(finding) else ""))


def print_unread(console: Console, summary: Summary) -> None:
    """Files the tool failed on, and files it could not read."""
    for display, error in summary.errors:
        console.print(f"[red]error[/] {display}: {escape(error)} (file left untouched)")
    for display, why in summary.unread:
        console.print(f"[red]not read[/] {display}: {escape(why)} (file left untouched)")


def print_problems(console: Console, summary: Summary) -> None:
    """Files the tool failed on or could not read, files skipped on purpose, stale suppressions."""
    print_unread(console, summary)
    for display, reason in summary.skipped:
        console.print(f"[yellow]skipped[/] {display}: {reason}")
    if summary.ignored:
        files, folders = summary.ignored["file"], summary.ignored["folder"]
        console.print(f"[yellow]skipped[/] {files} file(s) and {folders} folder(s) {IGNORED}")
    for display, line in summary.unused_suppressions:
        console.print(f"[yellow]unused suppression[/] {display}:{line}: {UNUSED_WHY}")


def print_summary(console: Console, summary: Summary) -> None:
    print_problems(console, summary)
    if not summary.findings:
        read = summary.files - len(summary.skipped) - len(summary.errors) - len(summary.unread)
        unread = len(summary.unread) + len(summary.errors)
        left = f"; {unread} file(s) not read or failed (above)" if unread else ""
        if summary.nothing_read:
            console.print(f"Nothing was read: all {summary.files} file(s) were skipped.")
        elif summary.not_reported:
            why = "; ".join(f"{count} {because}" for count, because in summary.not_reported)
            console.print(f"No finding to report in {read} file(s) read: {why}{left}.")
        else:
            console.print(f"No CUDA-specific code found in {read} file(s) read{left}.")
        return
    table = Table(title="CUDA touchpoints by category", title_justify="left")
    table.add_column("category")
    for column in ("safe", "unsafe", "manual", "note", "total"):
        table.add_column(column, justify="right")
    for category, counts in summary.by_category.items():
        values = [counts.get(k, 0) for k in ("safe", "unsafe", "manual", "note")]
        table.add_row(category, *map(str, values), str(sum(values)))
    console.print(table)
    console.print(
        f"{summary.findings} finding(s) in {summary.files_with_findings} of {summary.files} file(s): "
        f"{summary.automatic} migrate automatically ({summary.automatic_share:.0%}), "
        f"{summary.opt_in} more with --unsafe, "
        f"{summary.manual} need a human, {summary.notes} note(s).",
    )
    if len(summary.by_file_kind) > 1:
        kinds = ", ".join(f"{n} in {kind} files" for kind, n in sorted(summary.by_file_kind.items()))
        console.print(f"By kind of file: {kinds}.")
    if summary.held_by_reason:
        held = sum(n for _, n in summary.held_by_reason)
        reasons = ", ".join(f"{reason} ({n})" for reason, n in summary.held_by_reason)
        console.print(f"{held} fix(es) held back so the code is never worse than unmigrated: {reasons}.")
    if summary.dual_path_files:
        files = summary.dual_path_files
        shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
        console.print(
            f"{len(files)} file(s) already run on the NPU beside CUDA ({shown}): their CUDA code is left "
            "for the GPU path."
        )
    if summary.suppressed:
        console.print(f"{summary.suppressed} finding(s) suppressed by `# npu-migrate: ignore` comments.")
    if summary.overridden:
        total = sum(summary.overridden.values())
        codes = ", ".join(f"{code} ({n})" for code, n in summary.overridden.items())
        console.print(f"{total} catalog finding(s) overridden by your rules: {codes}")
    if summary.manual_by_file:
        console.print(
            "Most manual work: " + ", ".join(f"{f} ({n})" for f, n in summary.manual_by_file[:5]),
        )
