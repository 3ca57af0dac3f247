"""What the commands share: the consoles, option types, one-line errors, rule loading,
discovery and the progress display around a run."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from npu_migrate.cache import ResultCache
from npu_migrate.discover import discover
from npu_migrate.model import Applicability, FileOutcome, Finding, SourceFile
from npu_migrate.pipeline import RuleSource, default_jobs, run_rules, salt
from npu_migrate.report.gate import FailOn, verdict

if TYPE_CHECKING:
    from npu_migrate.rules.schema import Rule

out = Console(highlight=False, soft_wrap=True, emoji=False)  # `file:100:4` is a place, not 💯
err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)


RulesOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--rules",
        help="Extra rule file, folder of *.yaml or opt-in rule set of the catalog by name "
        "(npu-fused-optimizers), repeatable. Where one of these rules and a catalog rule match the "
        "same code, this one wins (the catalog finding is counted as overridden).",
    ),
]
PathsArgument = Annotated[list[Path], typer.Argument(help="Files or folders to process.")]
MaxSize = Annotated[int, typer.Option(help="Skip files larger than this many bytes.")]
Emulate = Annotated[
    bool | None,
    typer.Option(
        "--emulate/--no-emulate",
        help="Force the NPU emulation on or off (default: emulate when no real torch_npu imports).",
    ),
]
NoCache = Annotated[
    bool,
    typer.Option("--no-cache", help="Look at every file again, ignoring (and not filling) the result cache."),
]
Jobs = Annotated[
    int | None, typer.Option("--jobs", "-j", min=1, help="Worker processes (default: one per CPU).")
]

FailOnOption = Annotated[
    FailOn | None,
    typer.Option(
        "--fail-on",
        help="The least severe finding that makes the exit code 1: error (CUDA-only code that fails on "
        "an NPU), warning (every CUDA-specific finding; the default) or info (suggestions and notes "
        "as well: device-agnostic code that runs as it is).",
        show_default=False,
    ),
]
ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="A pyproject.toml with \\[tool.npu-migrate], or a TOML file of those keys (default: the "
        "nearest pyproject.toml with the table above the first path).",
    ),
]
Quiet = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        help="Print only the findings and the files that could not be read: no summary, and no last "
        "line where the gate passes (a pre-commit hook's run, batch after batch).",
    ),
]
ExitZero = Annotated[
    bool, typer.Option("--exit-zero", help="Exit 0 even where findings remain (2 still means an error).")
]


def finish(
    findings: list[Finding],
    fail_on: FailOn,
    exit_zero: bool,
    failed: str = "",
    unread: int = 0,
    quiet: bool = False,
) -> NoReturn:
    """End the run with the gate's exit code, and a last line on stderr that says what it means
    (under --quiet, only where the gate fails)."""
    code, meaning = verdict(findings, fail_on, exit_zero, failed, unread)
    if code or not quiet:
        err.print(meaning, style="dim" if code == 0 else None)
    raise typer.Exit(code)


def fail(text: str) -> NoReturn:
    err.print(f"[red]error:[/] {escape(text)}")
    raise typer.Exit(2)


def report_path(path: Path | None, option: str, suffixes: tuple[str, ...]) -> None:
    """A report's path, checked before the run that fills it: its folder exists, and it names
    no folder and no existing file of another kind (`--json tests/test_a.py` would replace the
    user's source), or a one-line error."""
    if path is None:
        return
    if not path.parent.is_dir():
        fail(f"{option} {path}: its folder does not exist")
    if path.is_dir():
        fail(f"{option} {path}: a folder; give a file")
    if path.exists() and path.suffix.lower() not in suffixes:
        fail(
            f"{option} {path}: an existing file that is not a {' or '.join(suffixes)} report; "
            "it is left alone"
        )


def needs_torch(command: str, missing: ImportError) -> NoReturn:
    fail(
        f"{command} needs torch ({missing.name} is missing): install the verify extra, "
        "`pip install '.[verify]'` in npu-migrate's checkout"
    )


def load(extra: list[Path] | None) -> list[Rule]:
    """The catalog and the user's rule files, or a one-line error."""
    from npu_migrate.rules.files import RuleError
    from npu_migrate.rules.load import load_rules

    try:
        return load_rules(extra or [])
    except RuleError as exc:
        fail(str(exc))


def existing(paths: list[Path]) -> list[Path]:
    """The paths that exist. A list of several (a change's files) may name deleted ones: each is
    skipped with a note; a single path that does not exist is an error (a typo)."""
    if len(paths) < 2:
        return paths
    for path in paths:
        if not path.exists():
            err.print(f"[yellow]skipped[/] {escape(str(path))}: no such file or folder (deleted?)")
    return [p for p in paths if p.exists()]


def find_files(paths: list[Path], max_size: int) -> list[SourceFile]:
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        fail(f"no such file or folder: {', '.join(missing)}")
    return discover(paths, max_size)


def never_over_a_source(outputs: list[Path | None], files: list[SourceFile]) -> None:
    """A report, baseline or change list must not replace a file the run reads."""
    written = [path for path in outputs if path is not None and path.exists()]
    if not written:  # most runs: nothing to compare, and no file of the tree to resolve
        return
    read = {f.path.resolve() for f in files if f.data is not None}
    for path in written:
        if path.resolve() in read:
            fail(f"{path} is one of the files being read; an output never replaces a source")


PROGRESS_SECONDS = 10.0  # how often a piped run (a CI log) says how far it is


@contextmanager
def progress(total: int, label: str) -> Iterator[Callable[[], None]]:
    """A progress bar on stderr for long runs in a terminal; where stderr is piped (a CI log),
    a line every PROGRESS_SECONDS."""
    if total < 20:
        yield lambda: None
        return
    if not err.is_terminal:
        start = last = time.monotonic()
        done = 0

        def advance() -> None:
            nonlocal done, last
            done += 1
            now = time.monotonic()
            if now - last >= PROGRESS_SECONDS and done < total:
                err.print(f"{label}: {done}/{total} file(s), {now - start:.0f} s")
                last = now

        yield advance
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=total)
        yield lambda: bar.advance(task)


def run(
    files: list[SourceFile],
    rules: RuleSource,
    enabled: frozenset[Applicability],
    jobs: int | None,
    use_cache: bool = True,
) -> list[FileOutcome]:
    """The rules over the files, with a progress display; rule-file errors end the run here."""
    from npu_migrate.rules.files import RuleError

    try:
        cache = ResultCache(salt=salt(rules, enabled)) if use_cache else None
        with progress(len(files), "migrating" if enabled else "scanning") as advance:
            return run_rules(files, rules, enabled, advance, jobs or default_jobs(), cache)
    except RuleError as exc:
        fail(str(exc))
