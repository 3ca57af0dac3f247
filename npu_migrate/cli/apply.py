"""`npu-migrate apply`: rewrite the code, in place or into a copy, and write the change list."""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from npu_migrate.cli import common, selection
from npu_migrate.discover import DEFAULT_MAX_BYTES
from npu_migrate.git import top_level
from npu_migrate.interrupt import leaving
from npu_migrate.model import Applicability
from npu_migrate.report.changes import ChangeListError, read_change_list, write_change_list
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
    diff: Annotated[
        bool,
        typer.Option(
            "--diff",
            help="Write nothing (no file, no change list): print the unified diff of what apply would "
            "change, the summary on stderr. Exit 1 if it would change a file, else as apply would.",
        ),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Write nothing: print what apply would rewrite and leave (no diff), and exit as it would.",
        ),
    ] = False,
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; exit 1 if apply would change any file, else 0.")
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
            help="Where to write the change list (.csv, and .json beside it), merged with an earlier "
            "run's of the same tree. Default: beside the tree migrated (the copy with --out), or "
            "beside the git repository it lies in, named after it: TREE-npu-migrate-changes.csv.",
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
    dry_run = dry_run or check or diff
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
    if listed and change_list is not None:  # checked as a report's path is
        if change_list.is_dir() or not change_list.name:
            common.fail(f"cannot write the change list {change_list}: a folder; name a file")
        if not change_list.parent.is_dir():
            common.fail(f"cannot write the change list {change_list}: its folder does not exist")
    tree = ""
    earlier: list[dict] | None = None
    if listed:  # what can fail early fails before any work
        migrated = _migrated(paths, out_dir)
        change_list = change_list or _beside(migrated)
        tree = f"{paths[0].resolve()} -> {migrated}" if out_dir else str(migrated)  # a copy's: of what
        common.never_over_a_source([change_list.with_suffix(".csv"), change_list.with_suffix(".json")], files)
        earlier = _earlier(change_list, tree)
    else:
        change_list = None
    with leaving("no file was written"):
        outcomes = selection.run_selected(files, chosen, enabled_fixes(unsafe), jobs, use_cache=not no_cache)
    changed = [o for o in outcomes if o.changed]
    if diff:
        for outcome in changed:
            sys.stdout.write(unified_diff(outcome))
    written = Written()
    said = ""  # what the last lines say of the change list
    if change_list is not None:  # what can fail before a source is touched fails here
        if earlier is not None and not changed:  # the record of an earlier run stays as it is
            said = f"{change_list.with_suffix('.csv')} kept as an earlier run wrote it (nothing rewritten)"
            change_list = None
        else:
            _ready(change_list)
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
        if change_list is not None:
            csv_path, json_path = change_list.with_suffix(".csv"), change_list.with_suffix(".json")
            try:
                rows, kept = write_change_list(change_list, tree, outcomes, written.not_written, earlier)
                said = f"{csv_path} and {json_path}" + (
                    f", {rows} row(s), {kept} of them kept from earlier runs" if earlier is not None else ""
                )
            except OSError as exc:
                common.err.print(
                    f"[red]error:[/] cannot write the change list {escape(str(csv_path))}: "
                    f"{escape(exc.strerror or str(exc))}"
                )
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
        print_findings(console, left, chosen.fail_on)
    print_problems(console, summary)
    for name, why in written.not_written.items():
        console.print(f"[red]not written[/] {escape(name)}: {escape(why)}")
    for name, note in written.notes.items():
        console.print(f"[yellow]note[/] {escape(name)}: {escape(note)}")
    if said:
        console.print(f"change list: {escape(said)}")
    failed = tool_failure(summary) or (
        f"{len(written.not_written)} file(s) not written" if written.not_written else ""
    )
    if check and not failed:
        common.err.print(f"exit {int(bool(changed))}: apply would change {len(changed)} file(s) (--check)")
        raise typer.Exit(1 if changed else 0)
    if diff and changed and not failed and not exit_zero:  # as `ruff check --diff`: fixes to apply fail
        common.err.print(f"exit 1: apply would change {len(changed)} file(s) (--diff)")
        raise typer.Exit(1)
    common.finish([finding for _, finding in left], chosen.fail_on, exit_zero, failed, len(summary.unread))


def _migrated(paths: list[Path], out_dir: Path | None) -> Path:
    """The tree apply rewrites, whose change list this run writes: the copy (--out), else the
    folder of every path it reads, or the git repository that folder lies in (so runs over parts
    of one repository keep one record)."""
    if out_dir is not None:
        return out_dir.resolve()
    folders = [path.resolve() if path.is_dir() else path.resolve().parent for path in paths]
    folder = Path(os.path.commonpath(folders))
    return top_level(folder) or folder


def _beside(tree: Path) -> Path:
    """The default change list: beside the tree migrated, or beside the git repository it lies in,
    named after it, whatever folder apply runs from; so it lands neither in the migrated
    repository nor among another tree's change lists."""
    outer = top_level(tree) or tree
    if outer.parent == outer:
        common.fail(f"no folder beside {outer} for the change list: name one with --change-list")
    return outer.parent / "-".join([outer.name, *tree.relative_to(outer).parts, "npu-migrate-changes.csv"])


def _earlier(change_list: Path, tree: str) -> list[dict] | None:
    """The rows of the change list an earlier run of `tree` left at `change_list`, to merge this
    run's with; anything there a write would lose (a folder, a file of the user's, a list the user
    edited, another tree's) is a one-line error, and left as it is."""
    try:
        return read_change_list(change_list, tree)
    except ChangeListError as exc:
        common.fail(
            f"cannot write the change list {exc}; it is left as it is: move it aside, or name another "
            "with --change-list"
        )


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
