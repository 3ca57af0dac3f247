"""`npu-migrate scan`: the inventory of every CUDA-specific construct."""

from __future__ import annotations

import functools
from typing import Annotated

import typer

from npu_migrate.cli import common, output
from npu_migrate.discover import DEFAULT_MAX_BYTES
from npu_migrate.pipeline import RuleSource
from npu_migrate.report.formats import Report
from npu_migrate.report.gate import FailOn, tool_failure
from npu_migrate.report.summary import Summary
from npu_migrate.suppress import add_suppressions


def scan(
    paths: common.PathsArgument,
    format: output.FormatOption = None,
    output_file: output.OutputFile = None,
    rules: common.RulesOption = None,
    max_size: common.MaxSize = DEFAULT_MAX_BYTES,
    jobs: common.Jobs = None,
    no_cache: common.NoCache = False,
    fail_on: common.FailOnOption = FailOn.work,
    exit_zero: common.ExitZero = False,
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
    files = common.find_files(paths, max_size)
    outcomes = common.run(files, RuleSource(rules or []), frozenset(), jobs, use_cache=not no_cache)
    summary = Summary.of(outcomes)
    catalog = functools.cache(lambda: {rule.code: rule for rule in common.load(rules)})  # only if asked
    output.write_reports(chosen, Report(outcomes, summary, catalog, fail_on))
    findings = [finding for outcome in outcomes for finding in outcome.result.findings]
    if add_ignore:
        failing = {id(f): f for f in findings if fail_on.fails(f)}
        added = add_suppressions(outcomes, failing)
        common.err.print(f"added suppressions on {added.comments} line(s) in {added.files} file(s)")
        for where in added.unplaced:
            common.err.print(f"[yellow]not suppressed[/] {where}: no line of it can take a comment")
        findings = [f for f in findings if id(f) not in added.suppressed]
    common.finish(findings, fail_on, exit_zero, tool_failure(summary))
