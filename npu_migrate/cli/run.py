"""`npu-migrate run`: a migrated script, on the NPU emulation where no NPU exists."""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from npu_migrate import processes
from npu_migrate.cli import common, forecasting
from npu_migrate.forecast import kernels

if TYPE_CHECKING:
    from npu_migrate.forecast.session import Request

# Options after the script are the script's own.
CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True, "allow_interspersed_args": False}


def run(
    ctx: typer.Context,
    script: Annotated[
        str,
        typer.Argument(
            help="The Python script to run, or a launch script or command (torchrun, `python -m "
            "torch.distributed.run`, accelerate launch, bash train.sh); its arguments follow it.",
            show_default=False,
        ),
    ],
    emulate: common.Emulate = None,
    npus: Annotated[
        int | None,
        typer.Option(
            "--npus",
            min=1,
            help="How many NPUs the emulated host has, 1 to 16 (what torch.npu.device_count(), npu-smi and "
            "launchers such as deepspeed see); default: one per rank torchrun starts, else one.",
            show_default=False,
        ),
    ] = None,
    forecast: Annotated[
        bool,
        typer.Option(
            "--forecast",
            help="Say what a real NPU will do with the run: operators without an NPU kernel in the "
            "chosen torch_npu, dtypes it runs slowly or not at all, shapes that vary, host syncs, "
            "memory per step, collectives HCCL refuses, where the FLOPs go (needs the emulation).",
        ),
    ] = False,
    forecast_json: Annotated[
        Path | None,
        typer.Option("--forecast-json", help="Write the forecast as JSON here (implies --forecast)."),
    ] = None,
    forecast_html: Annotated[
        Path | None,
        typer.Option("--forecast-html", help="Write the forecast as an HTML page here (implies --forecast)."),
    ] = None,
    torch_npu: forecasting.TorchNpu = kernels.DEFAULT_VERSION,
    chip: forecasting.Chip = "910B",
    card_memory: forecasting.CardMemory = None,
) -> None:
    """Run a migrated script as `python SCRIPT ARGS` would, or a launcher and every process it
    starts, on the NPU emulation where no NPU exists."""
    path = Path(script)
    if path.is_dir():
        common.fail(f"{script} is a folder; give the script to run")
    try:
        from npu_migrate.emulation import MAX_NPUS
        from npu_migrate.emulation.runner import (
            emulate_the_host,
            guards_reported,
            real_torch_npu_imports,
            run_command,
            run_script,
            runs_in_python,
            search_path,
        )
    except ImportError as exc:
        common.needs_torch("run", exc)
    if emulate is None:
        emulate = not real_torch_npu_imports()
    if emulate:
        _needs_torch()
    if npus is not None and not emulate:
        common.fail("--npus sets the emulated host's NPUs: it needs the emulation (--emulate)")
    if npus is not None and npus > MAX_NPUS:
        common.fail(f"--npus {npus}: an Ascend host holds at most {MAX_NPUS} NPUs")
    wanted = None
    if forecast or forecast_json is not None or forecast_html is not None:
        wanted = forecasting.request(emulate, torch_npu, chip, card_memory, forecast_json, forecast_html)
    command = None if path.is_file() else shutil.which(script, path=search_path(emulate))
    if not path.is_file() and command is None:
        common.fail(f"no such script or command: {script}")
    if emulate:
        emulate_the_host(npus)
    with (
        processes.contained(),
        guards_reported(Path.cwd()) if emulate else contextlib.nullcontext(),
        _recorded(wanted) if wanted is not None else contextlib.nullcontext(),
    ):
        if command is None and runs_in_python(path):
            code = run_script(path, list(ctx.args), emulate)
        else:
            code = run_command([command or str(path), *ctx.args])
    raise typer.Exit(code)


def _needs_torch() -> None:
    """The emulation runs on torch: without it, say which extra, before the script starts (and
    without importing torch here, a second and more of every run)."""
    try:
        found = importlib.util.find_spec("torch") is not None
    except ImportError:
        found = False
    if not found:
        common.needs_torch("run --emulate", ModuleNotFoundError(name="torch"))


def _recorded(wanted: Request) -> contextlib.AbstractContextManager[None]:
    from npu_migrate.forecast import session  # only where a forecast is asked for

    return session.recorded(wanted, Path.cwd())
