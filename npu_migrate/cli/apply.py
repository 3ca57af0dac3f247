"""`npu-migrate apply`: rewrite the code, in place or into a copy, and write the change list."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from npu_migrate.cli import common, selection
from npu_migrate.discover import DEFAULT_MAX_BYTES
from npu_migrate.interrupt import leaving
from npu_migrate.model import Applicability
from npu_migrate.report.changes import write_change_list
from npu_migrate.report.diff import unified_diff
from npu_migrate.report.formats.text import print_findings, print_problems
from npu_migrate.report.gate import tool_failure
from npu_migrate.report.summary import Summary, all_findings, label
from npu_migrate.report.written import as_written
from npu_migrate.write import RefusedWrite, Written, write_outcomes


def enabled_fixes(unsafe: bool) -> frozenset[Applicability]:
    return frozenset({Applicability.safe, *([Applicability.unsafe] if unsafe else [])})


def apply(
    paths: common.PathsArgument,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="Write a migrated copy of the (single) folder here instead of in place."),
    ] = None,
    diff: Annotated[bool, typer.Option("--diff", help="Print a unified diff of every change.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Write nothing.")] = False,
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; exit 1 if apply would change any file.")
    ] = False,
    unsafe: Annotated[
        bool | None,
        typer.Option(
            "--unsafe/--no-unsafe",
            help="Also apply fixes that may change behaviour (default: the configuration's `unsafe`).",
            show_default=False,
        ),
    ] = None,
    rules: common.RulesOption = None,
    change_list: Annotated[
        Path | None,
        typer.Option(
            help="Where to write the change list (.csv, and .json beside it). Default: "
            "npu-migrate-changes.csv here, or beside the migrated folder when here is inside it.",
            show_default=False,
        ),
    ] = None,
    no_change_list: Annotated[
        bool, typer.Option("--no-change-list", help="Write no change list (a pre-commit hook's run).")
    ] = False,
    max_size: common.MaxSize = DEFAULT_MAX_BYTES,
    jobs: common.Jobs = None,
    no_cache: common.NoCache = False,
    config: common.ConfigOption = None,
    select: selection.Select = None,
    extend_select: selection.ExtendSelect = None,
    ignore: selection.Ignore = None,
    fail_on: common.FailOnOption = None,
    exit_zero: common.ExitZero = False,
) -> None:
    """Rewrite CUDA code for the NPU, in place or into a copy (--out), keeping every comment and format."""
    chosen = selection.selection(paths, config, rules, select, extend_select, ignore, fail_on)
    dry_run = dry_run or check
    unsafe = chosen.run_config.settings.unsafe if unsafe is None else unsafe
    if out_dir is not None:
        if len(paths) != 1 or not paths[0].is_dir():
            common.fail("--out takes exactly one folder to copy")
        if out_dir.is_file():
            common.fail(f"--out {out_dir} is a file; name a folder for the migrated copy")
        if out_dir.is_symlink():
            common.fail(f"--out {out_dir} is a symbolic link; name a real folder")
        if out_dir.exists() and not (out_dir.is_dir() and not any(out_dir.iterdir())):
            common.fail(f"--out {out_dir} already exists and is not empty")
        if out_dir.resolve().is_relative_to(paths[0].resolve()):
            common.fail("--out must lie outside the folder being migrated")
    files = common.find_files(paths, max_size)
    listed = not dry_run and not no_change_list
    change_list = change_list or _default_change_list(paths, out_dir)
    if listed:
        common.never_over_a_source([change_list.with_suffix(".csv"), change_list.with_suffix(".json")], files)
    with leaving("no file was written"):
        outcomes = selection.run_selected(files, chosen, enabled_fixes(unsafe), jobs, use_cache=not no_cache)
    changed = [o for o in outcomes if o.changed]
    if diff:
        for outcome in changed:
            sys.stdout.write(unified_diff(outcome))
    written = Written()
    if listed:  # what can fail early fails before any source is touched
        earlier = change_list.with_suffix(".csv")
        if earlier.exists():
            common.err.print(f"note: the change list {earlier} of an earlier run is replaced")
        csv_path, json_path = _ready(change_list)
    state = f"{out_dir} was not made" if out_dir else "every file is either untouched or completely rewritten"
    if not dry_run:
        try:
            with leaving(state):
                written = write_outcomes(outcomes, paths[0] if out_dir else None, out_dir)
        except RefusedWrite as exc:
            common.fail(f"nothing written to {out_dir}: {exc}")
        except OSError as exc:
            common.fail(f"nothing written to {out_dir}: {exc.strerror or exc}")
        outcomes = as_written(outcomes, written, paths[0] if out_dir else None, out_dir)
        try:
            if listed:
                write_change_list(change_list, outcomes, written.not_written)
        except OSError as exc:
            common.err.print(f"[red]error:[/] cannot write the change list {csv_path}: {exc.strerror or exc}")
    summary = Summary.of(outcomes)
    console = common.err if diff else common.out
    left = [(display, f) for display, f in all_findings(outcomes) if not f.applied]
    applied = sum(f.applied for o in outcomes for f in o.result.findings)
    verb = "would rewrite" if dry_run else "rewrote"
    console.print(
        f"{verb} {len(changed)} file(s), {applied} change(s)"
        + (f" into {out_dir}" if out_dir and not dry_run else "")
    )
    if left:
        kinds = Counter(label(finding) for _, finding in left).most_common()
        console.print(f"Left as it is ({len(left)}: {', '.join(f'{n} {kind}' for kind, n in kinds)}):")
        print_findings(console, left)
    print_problems(console, summary)
    for name, why in written.not_written.items():
        console.print(f"[red]not written[/] {escape(name)}: {escape(why)}")
    for name, note in written.notes.items():
        console.print(f"[yellow]note[/] {escape(name)}: {escape(note)}")
    if listed:
        console.print(f"change list: {csv_path} and {json_path}")
    failed = tool_failure(summary) or (
        f"{len(written.not_written)} file(s) not written" if written.not_written else ""
    )
    if check and not failed:
        common.err.print(f"exit {int(bool(changed))}: apply would change {len(changed)} file(s) (--check)")
        raise typer.Exit(1 if changed else 0)
    common.finish([finding for _, finding in left], chosen.fail_on, exit_zero, failed, len(summary.unread))


def _default_change_list(paths: list[Path], out_dir: Path | None) -> Path:
    """Here, unless here is inside a folder being migrated (or the copy): then beside that folder,
    so that the change list never lands in the migrated repository."""
    here = Path.cwd().resolve()
    for tree in [out_dir] if out_dir else paths:
        root = tree.resolve() if tree.is_dir() or tree == out_dir else tree.resolve().parent
        if here.is_relative_to(root):
            return root.parent / f"{root.name}-npu-migrate-changes.csv"
    return Path("npu-migrate-changes.csv")


def _ready(change_list: Path) -> tuple[Path, Path]:
    """The change list's two paths, made sure writable before any source is touched (what is not a
    regular file, a FIFO or /dev/null, is written into as it is: opening a FIFO here would wait)."""
    paths = change_list.with_suffix(".csv"), change_list.with_suffix(".json")
    try:
        change_list.parent.mkdir(parents=True, exist_ok=True)
        for path in paths:
            if path.exists() and not path.is_file() and not path.is_dir():
                continue
            with path.open("ab"):
                pass
    except OSError as exc:
        common.fail(f"cannot write the change list {exc.filename or change_list}: {exc.strerror or exc}")
    return paths
