"""`npu-migrate run`: a migrated script, on the NPU emulation where no NPU exists."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from npu_migrate.cli import common

# Options after the script are the script's own.
CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True, "allow_interspersed_args": False}


def run(
    ctx: typer.Context,
    script: Annotated[Path, typer.Argument(help="The Python script to run; its arguments follow it.")],
    emulate: common.Emulate = None,
) -> None:
    """Run a migrated script as `python SCRIPT ARGS` would, on the NPU emulation where no NPU exists."""
    if script.is_dir():
        common.fail(f"{script} is a folder; give the Python script to run")
    if not script.is_file():
        common.fail(f"no such script: {script}")
    try:
        from npu_migrate.emulation.runner import real_torch_npu_imports, run_script
    except ImportError as exc:
        common.needs_torch("run", exc)
    if emulate is None:
        emulate = not real_torch_npu_imports()
    raise typer.Exit(run_script(script, list(ctx.args), emulate))


#####VERIFY
