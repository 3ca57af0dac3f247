"""`npu-migrate scan`: the inventory of every CUDA-specific construct."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from npu_migrate.cli import common
from npu_migrate.discover import DEFAULT_MAX_BYTES
from npu_migrate.pipeline import RuleSource
from npu_migrate.report.formats import FORMATS
from npu_migrate.report.gate import FailOn, tool_failure
from npu_migrate.report.summary import Summary

Format = Enum("Format", {name: name for name in FORMATS}, type=str)  # type: ignore[misc]


def scan(
    paths: common.PathsArgument,
    format: Annotated[Format, typer.Option("--format", help="Output format.")] = "text",  # type: ignore[assignment]
    rules: common.RulesOption = None,
    max_size: common.MaxSize = DEFAULT_MAX_BYTES,
    jobs: common.Jobs = None,
    no_cache: common.NoCache = False,
    fail_on: common.FailOnOption = FailOn.work,
    exit_zero: common.ExitZero = False,
) -> None:
    """Inventory every CUDA-specific construct: what migrates automatically, what needs a human."""
    files = common.find_files(paths, max_size)
    outcomes = common.run(files, RuleSource(rules or []), frozenset(), jobs, use_cache=not no_cache)
    summary = Summary.of(outcomes)
    FORMATS[Format(format).value](common.out, outcomes, summary)
    findings = [finding for outcome in outcomes for finding in outcome.result.findings]
    common.finish(findings, fail_on, exit_zero, tool_failure(summary))
