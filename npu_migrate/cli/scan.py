"""`npu-migrate scan`: the inventory of every CUDA-specific construct, and the CI gate."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from npu_migrate import discover
from npu_migrate.cli import common, output, selection
from npu_migrate.discover import DEFAULT_MAX_BYTES
from npu_migrate.git import GitError
from npu_migrate.gitdiff import changed_lines, touches
from npu_migrate.model import FileOutcome, Finding
from npu_migrate.report.anchor import repository_root
from npu_migrate.report.baseline import (
    BaselineError,
    check_replaceable,
    new_findings,
    read_baseline,
    write_baseline,
)
from npu_migrate.report.formats import Report
from npu_migrate.report.gate import tool_failure
from npu_migrate.report.summary import Summary


def scan(
    paths: common.PathsArgument,
    format: output.FormatOption = None,
    output_file: output.OutputFile = None,
    rules: common.RulesOption = None,
    max_size: common.MaxSize = DEFAULT_MAX_BYTES,
    jobs: common.Jobs = None,
    no_cache: common.NoCache = False,
    config: common.ConfigOption = None,
    select: selection.Select = None,
    extend_select: selection.ExtendSelect = None,
    ignore: selection.Ignore = None,
    fail_on: common.FailOnOption = None,
    exit_zero: common.ExitZero = False,
    quiet: common.Quiet = False,
    diff_from: Annotated[
        str | None,
        typer.Option(help="Report only findings on lines changed since this git revision (and new files)."),
    ] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(help="Report only findings this baseline file does not hold (see --update-baseline)."),
    ] = None,
    update_baseline: Annotated[
        bool, typer.Option("--update-baseline", help="Record every current finding in the --baseline file.")
    ] = False,
    stdin_filename: Annotated[
        str | None,
        typer.Option(help="With the path `-`: the name of the file read from stdin (for editors and hooks)."),
    ] = None,
    add_ignore: Annotated[
        bool,
        typer.Option(
            "--add-ignore",
            help="Add a `# npu-migrate: ignore[CODE]` comment for every finding that fails the gate, "
            "so that a legacy repository adopts the check at once and only new CUDA code fails it.",
        ),
    ] = False,
) -> None:
    """Inventory every CUDA-specific construct: what migrates automatically, what needs a human."""
    chosen = output.destinations(format, output_file)
    if update_baseline and baseline is None:
        common.fail("--update-baseline needs --baseline FILE")
    if update_baseline and baseline is not None:
        try:
            check_replaceable(baseline)
        except BaselineError as exc:
            common.fail(str(exc))
    from_stdin = paths == [Path("-")]
    if from_stdin and add_ignore:
        common.fail("--add-ignore writes files; it cannot suppress findings in what stdin gave")
    named = [Path(stdin_filename or ".")] if from_stdin else paths
    chosen_rules = selection.selection(named, config, rules, select, extend_select, ignore, fail_on)
    gate = chosen_rules.fail_on
    if from_stdin:
        files = [discover.from_stdin(stdin_filename or "<stdin>", sys.stdin.buffer.read())]
    else:
        files = common.find_files(common.existing(paths), max_size)
    common.never_over_a_source([file for _, file in chosen] + ([baseline] if update_baseline else []), files)
    outcomes = selection.run_selected(files, chosen_rules, frozenset(), jobs, use_cache=not no_cache)
    config_file = chosen_rules.run_config.path
    root = functools.cache(lambda: repository_root(named[0], config_file.parent if config_file else None))
    if update_baseline and baseline is not None:
        recorded = write_baseline(baseline, outcomes, root())
        common.err.print(f"recorded {recorded} finding(s) in the baseline {baseline}")
    dropped: list[tuple[int, str]] = []  # (findings, why) the filters below leave out
    if diff_from is not None:
        try:
            changed = changed_lines(next((p for p in paths if p.exists()), Path.cwd()), diff_from)
        except GitError as exc:
            common.fail(str(exc))
        outcomes = _only(
            outcomes,
            lambda o, f: touches(changed, o.file.path, f.line, f.end_line, f.cell),
            f"on lines unchanged since {diff_from}",
            dropped,
            quiet,
        )
    if baseline is not None:  # after --update-baseline, every finding is known
        try:
            new = new_findings(outcomes, read_baseline(baseline), root())
        except BaselineError as exc:
            common.fail(str(exc))
        known = f"known to the baseline {baseline}"
        outcomes = _only(outcomes, lambda o, f: id(f) in new, known, dropped, quiet)
    summary = replace(Summary.of(outcomes), not_reported=dropped)
    catalog = functools.cache(lambda: {r.code: r for r in common.load(chosen_rules.extra_rules)})  # if asked
    output.write_reports(chosen, Report(outcomes, summary, catalog, root, gate, quiet))
    findings = [finding for outcome in outcomes for finding in outcome.result.findings]
    if add_ignore:
        from npu_migrate.suppress import add_suppressions  # it imports the engine: only here

        failing = {id(f): f for f in findings if gate.fails(f)}
        added = add_suppressions(outcomes, failing)
        common.err.print(f"added suppressions on {added.comments} line(s) in {added.files} file(s)")
        for finding_at in added.unplaced:
            common.err.print(f"[yellow]not suppressed[/] {finding_at}")
        findings = [f for f in findings if id(f) not in added.suppressed]
    common.finish(findings, gate, exit_zero, tool_failure(summary), len(summary.unread), quiet)


def _only(
    outcomes: list[FileOutcome],
    keep: Callable[[FileOutcome, Finding], bool],
    dropped_because: str,
    dropped: list[tuple[int, str]],
    quiet: bool,
) -> list[FileOutcome]:
    """The outcomes with only the findings `keep` keeps; how many went, said on stderr (but under
    --quiet) and added to `dropped` (the summary says it where nothing is left to report)."""
    kept = [
        replace(o, result=replace(o.result, findings=[f for f in o.result.findings if keep(o, f)]))
        for o in outcomes
    ]
    gone = sum(len(o.result.findings) for o in outcomes) - sum(len(o.result.findings) for o in kept)
    if gone:
        if not quiet:
            common.err.print(f"{gone} finding(s) not reported: {dropped_because}")
        dropped.append((gone, f"finding(s) {dropped_because}"))
    return kept
