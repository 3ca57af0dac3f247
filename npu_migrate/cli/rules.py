"""`npu-migrate rules`: list, explain, document and test the rules."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from npu_migrate.cli import common
from npu_migrate.rules.files import RuleError, builtin_rules_dir, rule_files

# The rule engine is imported inside each command: `npu-migrate --help` and a scan whose results
# are all cached never need it.


def list_rules(
    rules: common.RulesOption = None,
    format: Annotated[
        str, typer.Option("--format", help="table (for people) or json (for tools).")
    ] = "table",
) -> None:
    """Every rule: code, name, category, fix safety and summary."""
    if format not in ("table", "json"):
        common.fail(f"--format {format!r} is not one of table, json")
    loaded = common.load(rules)
    if format == "json":
        fields = ("code", "name", "category", "severity", "applicability", "summary", "why")
        records = [{key: getattr(rule, key) for key in fields} for rule in loaded]
        sys.stdout.write(json.dumps(records, indent=2, default=lambda value: value.value) + "\n")
        return
    table = Table("code", "name", "category", "fix", "summary")
    for rule in loaded:
        table.add_row(rule.code, rule.name, rule.category, rule.applicability.value, rule.summary)
    common.out.print(table)


def show(code: str, rules: common.RulesOption = None) -> None:
    """One rule's page: what it does, why, its fix safety and an example."""
    from rich.markdown import Markdown

    from npu_migrate.rules import docs as rule_docs

    rule = next((r for r in common.load(rules) if r.code == code.upper()), None)
    if rule is None:
        common.fail(f"no rule {code}; see `npu-migrate rules list`")
    common.out.print(Markdown(rule_docs.rule_page(rule)))


def docs(rules: common.RulesOption = None) -> None:
    """Print the rule catalog as Markdown (docs/rules.md is generated with this)."""
    from npu_migrate.rules import docs as rule_docs

    sys.stdout.write(rule_docs.catalog(common.load(rules)))


def test(files: Annotated[list[Path], typer.Argument(help="Rule files or folders.")]) -> None:
    """Run the examples of the given rule files (exit 1 on any failure), and list the catalog
    rules each of your rules overlaps: where both match the same code, yours wins."""
    from npu_migrate.rules.load import load_rules
    from npu_migrate.rules.precedence import overlapped_catalog
    from npu_migrate.rules.testing import check_rules

    try:
        given = {str(path) for path in rule_files(files)}
        builtin = builtin_rules_dir().resolve()
        yours = [Path(p) for p in given if Path(p).resolve().parent != builtin]  # opt-in sets too
        rules = load_rules(yours)
    except RuleError as exc:
        common.fail(str(exc))
    tested = [
        r
        for r in rules
        if r.source in given or Path(r.source).resolve() in {Path(p).resolve() for p in given}
    ]
    catalog = [r for r in rules if r.builtin]
    for rule in tested:
        if rule.builtin:
            continue
        for other in overlapped_catalog(rule, catalog):
            common.out.print(
                f"{rule.code} overlaps catalog rule {other.code} ({other.name}): yours wins where both match"
            )
    failures = check_rules(tested)
    for failure in failures:
        common.out.print(f"[red]FAIL[/] {escape(str(failure))}")
    examples = sum(len(r.examples) for r in tested)
    common.out.print(f"{examples - len(failures)} passed, {len(failures)} failed")
    raise typer.Exit(1 if failures else 0)


def schema() -> None:
    """Print the JSON Schema of rule files (for editors)."""
    from npu_migrate.rules.schema import json_schema

    sys.stdout.write(json_schema())
