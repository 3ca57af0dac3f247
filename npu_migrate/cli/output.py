"""Where scan's report goes: `--format NAME[:FILE]`, repeatable, and `--output-file` for the one
format given without a file; files are written whole or not at all."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from npu_migrate.cli import common
from npu_migrate.report.formats import FORMATS, Report
from npu_migrate.write import write_output

FormatOption = Annotated[
    list[str] | None,
    typer.Option(
        "--format",
        help=f"Output format, repeatable: NAME, or NAME:FILE to write it to a file ({', '.join(FORMATS)}). "
        "Default: text.",
        show_default=False,
    ),
]
OutputFile = Annotated[
    Path | None,
    typer.Option("--output-file", "-o", help="Write the format given without a file here instead."),
]


def destinations(formats: list[str] | None, output_file: Path | None) -> list[tuple[str, Path | None]]:
    """(format, file or None for the terminal), checked before the run starts."""
    chosen = []
    for spec in formats or ["text"]:
        name, _, file = spec.partition(":")
        if name not in FORMATS:
            common.fail(f"--format {name!r} is not one of {', '.join(FORMATS)}")
        chosen.append((name, Path(file) if file else None))
    to_terminal = [name for name, file in chosen if file is None]
    if len(to_terminal) > 1:
        both = " and ".join(to_terminal)
        common.fail(f"--format {both}: only one format can go to the terminal; give the others a file")
    if output_file is not None:
        if not to_terminal:
            common.fail("--output-file names a file for a format without one; every --format has its file")
        chosen = [(name, file or output_file) for name, file in chosen]
    return chosen


def write_reports(chosen: list[tuple[str, Path | None]], report: Report) -> None:
    for name, file in chosen:
        if file is None:
            FORMATS[name](common.out, report)
            continue
        buffer = io.StringIO()
        FORMATS[name](
            Console(file=buffer, no_color=True, highlight=False, soft_wrap=True, width=200, emoji=False),
            report,
        )
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
            write_output(file, buffer.getvalue().encode("utf-8"))
        except OSError as exc:
            common.fail(f"cannot write the {name} report {file}: {exc.strerror or exc}")
