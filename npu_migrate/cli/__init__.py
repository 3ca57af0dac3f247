"""The `npu-migrate` command line, one module per command; this module only registers them.
Exit codes (report/gate.py): 0 nothing at or above --fail-on, 1 findings at or above it (scan)
or left at or above it (apply), 2 usage or tool error."""

from __future__ import annotations

import signal
from typing import Annotated

import typer
import typer.core
from rich.markup import escape

from npu_migrate.cli import apply, common, rules, run, scan, verify
from npu_migrate.interrupt import STOPPING, Interrupted, exit_now, interrupt

app = typer.Typer(
    help="Move PyTorch CUDA code to Ascend NPUs: scan an inventory, apply the rewrite, run and verify "
    "the migrated model, and browse the rules.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _version(shown: bool) -> None:
    if shown:
        from importlib.metadata import version  # the installed version, read when asked for

        common.out.print(f"npu-migrate {version('npu-migrate')}")
        raise typer.Exit()


@app.callback()
def main_options(
    show_version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Move PyTorch CUDA code to Ascend NPUs."""


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
    """The console entry point: an interrupted run (Ctrl-C, SIGTERM from `timeout` or a CI
    runner, SIGHUP from a closed terminal) stops its workers and says what state it left, exit
    130, 143 or 129; a bug in the tool is one line and exit 2, never a traceback with the
    'findings' exit code 1."""
    for signum in STOPPING:
        signal.signal(signum, interrupt)
    try:
        app(prog_name="npu-migrate")
    except Interrupted as stop:
        left = f"; {stop.left}" if stop.left else ""
        common.err.print(f"interrupted by {signal.Signals(stop.signum).name}{left}")
        exit_now(128 + stop.signum)
    except Exception as exc:  # the tool's own failure, not the user's input
        common.err.print(
            f"[red]internal error:[/] {type(exc).__name__}: {escape(str(exc))} "
            "(please report it with the command that caused it)"
        )
        raise SystemExit(2) from None
