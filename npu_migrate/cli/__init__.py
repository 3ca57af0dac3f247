"""The `npu-migrate` command line, one module per command; this module only registers them.
Exit codes: 0 nothing to report, 1 findings (scan) or findings left for a human (apply),
2 usage or tool error."""

from __future__ import annotations

import typer

from npu_migrate.cli import apply, common, rules, run, scan, verify

app = typer.Typer(
    help="Move PyTorch CUDA code to Ascend NPUs: scan it, rewrite it, and check the rules.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command()(scan.scan)
app.command()(apply.apply)
app.command(context_settings=run.CONTEXT)(run.run)
app.command()(verify.verify)

rules_app = typer.Typer(help="List, explain and test the migration rules.", no_args_is_help=True)
rules_app.command("list")(rules.list_rules)
rules_app.command("show")(rules.show)
rules_app.command("docs")(rules.docs)
rules_app.command("test")(rules.test)
rules_app.command("schema")(rules.schema)
app.add_typer(rules_app, name="rules")


def main() -> None:
    """The console entry point: an interrupted run ends quietly with the shell's code."""
    try:
        app(prog_name="npu-migrate")
    except KeyboardInterrupt:
        common.err.print("interrupted; every file is either untouched or completely rewritten")
        raise SystemExit(130) from None
