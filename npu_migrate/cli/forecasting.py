"""The forecast's options, shared by `run` and `verify`, and the request they make."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from npu_migrate.cli import common
from npu_migrate.forecast import kernels

if TYPE_CHECKING:
    from npu_migrate.forecast.session import Request

TorchNpu = Annotated[
    str, typer.Option("--torch-npu", help="The torch_npu version whose NPU operators the forecast reads.")
]
Chip = Annotated[
    str, typer.Option("--chip", help="The Ascend chip the forecast is for: 910B (Atlas A2) or 910A.")
]
CardMemory = Annotated[
    float | None,
    typer.Option(
        "--card-memory",
        min=0.001,
        help="The card's memory in GiB the forecast holds the peak against (default: the chip's).",
        show_default=False,
    ),
]


def request(
    emulate: bool | None,
    version: str,
    chip: str,
    card_memory: float | None,
    json_path: Path | None = None,
    html_path: Path | None = None,
) -> Request:
    """The forecast asked for, or a one-line error naming what there is (`emulate` None: the
    emulation where no real torch_npu imports)."""
    from npu_migrate.forecast import facts, session  # only where a forecast is asked for

    if emulate is False:
        common.fail("--forecast reads the emulated run: it needs the emulation (--emulate)")
    if chip not in facts.CARD_GIB:
        common.fail(f"--chip {chip}: the forecast knows {', '.join(facts.CARD_GIB)}")
    try:
        table = kernels.load(version)
    except ValueError as exc:
        common.fail(str(exc))
    common.report_path(json_path, "--forecast-json", (".json",))
    common.report_path(html_path, "--forecast-html", (".html", ".htm"))
    return session.Request(table, chip, card_memory or facts.CARD_GIB[chip], json_path, html_path)
