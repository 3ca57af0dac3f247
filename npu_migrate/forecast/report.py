"""The forecast as a terminal summary (ranked by expected harm), JSON, and an HTML page with the
memory per step plotted."""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from npu_migrate.forecast.analysis import Forecast

SHOWN = 12  # findings the terminal summary lists; JSON and HTML carry them all


def text(result: Forecast) -> str:
    lines = [
        f"NPU forecast for torch_npu {result.torch_npu} on an Ascend {result.chip} "
        f"({result.card_gib:g} GiB): {result.npu_calls:,} NPU operator calls over {result.steps} "
        f"step(s) ({_STEP_KINDS.get(result.step_kind, result.step_kind)}), {result.processes} process(es)"
    ]
    if not result.npu_calls:
        lines.append("  nothing ran on the NPU: does the program move its model and data there?")
    for finding in result.findings[:SHOWN]:
        more = f" and {len(finding.sites) - 3} more" if len(finding.sites) > 3 else ""
        where = f" at {', '.join(finding.sites[:3])}{more}" if finding.sites else ""
        lines.append(f"  [{finding.kind}] {finding.title}{where}")
        lines.append(f"      {finding.detail}")
    if len(result.findings) > SHOWN:
        lines.append(f"  ... and {len(result.findings) - SHOWN} more (JSON or HTML report)")
    if not result.findings and result.npu_calls:
        lines.append("  nothing found: every operator has an NPU kernel, no host sync, no growth")
    if result.memory:
        peak = max(m["peak_mib"] for m in result.memory)
        lines.append(f"  memory: peak {_size(peak)} on the NPU in a step (of {result.card_gib:g} GiB)")
    if result.hot_modules:
        hot = ", ".join(f"{m['module']} {m['share']:.0%}" for m in result.hot_modules[:4])
        lines.append(f"  where the FLOPs go ({result.total_flops:,} in all): {hot}")
    return "\n".join(lines)


_STEP_KINDS = {
    "optimizer": "a step ends at each optimizer step",
    "module call": "a step is an outermost module call",
}


def _size(mib: float) -> str:
    return f"{mib:,.1f} MiB" if mib >= 1 else f"{mib * 1024:,.1f} KiB"


def write_json(result: Forecast, path: Path) -> None:
    path.write_text(json.dumps(result.as_json(), indent=2) + "\n", encoding="utf-8")


def write_html(result: Forecast, path: Path) -> None:
    rows = "".join(
        f"<tr><td>{html.escape(f.kind)}</td><td>{html.escape(f.title)}</td>"
        f"<td>{html.escape(', '.join(f.sites))}</td><td>{html.escape(f.detail)}</td></tr>"
        for f in result.findings
    )
    images = "".join(
        f'<img alt="{alt}" src="data:image/png;base64,{plot}">'
        for alt, plot in (
            ("NPU memory per step", _memory_plot(result)),
            ("new shapes per call site", _shape_plot(result)),
        )
        if plot
    )
    page = (
        "<!doctype html><meta charset='utf-8'><title>NPU forecast</title>"
        f"<h1>NPU forecast: torch_npu {html.escape(result.torch_npu)}, Ascend {html.escape(result.chip)}</h1>"
        f"<p>{result.npu_calls:,} NPU operator calls over {result.steps} step(s).</p>"
        "<table border=1><tr><th>kind</th><th>finding</th><th>where</th><th>why</th></tr>"
        f"{rows}</table>{images}"
    )
    path.write_text(page, encoding="utf-8")


def _memory_plot(result: Forecast) -> str:
    """The NPU memory per step, or '' with fewer than two steps."""
    if len(result.memory) < 2:
        return ""
    steps = [m["step"] for m in result.memory]

    def draw(axes: Any) -> None:
        axes.plot(steps, [m["peak_mib"] for m in result.memory], label="peak")
        axes.plot(steps, [m["end_mib"] for m in result.memory], label="held at the step's end")
        axes.set_xlabel("step")
        axes.set_ylabel("NPU MiB")
        axes.legend()

    return _png(draw)


def _shape_plot(result: Forecast) -> str:
    """The call sites with new input shapes after the first step, or ''."""
    if not result.shape_variety:
        return ""
    sites = [entry["site"] for entry in reversed(result.shape_variety)]

    def draw(axes: Any) -> None:
        axes.barh(range(len(sites)), [e["new_shapes"] for e in reversed(result.shape_variety)])
        axes.set_yticks(range(len(sites)), [site.replace("$", r"\$") for site in sites])
        axes.set_xlabel("new input shapes after the first step")

    return _png(draw)


def _png(draw: Callable[[Any], None]) -> str:
    """A figure drawn by `draw` as a base64 PNG, or '' without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        return ""
    figure, axes = pyplot.subplots(figsize=(7, 3))
    draw(axes)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    pyplot.close(figure)
    return base64.b64encode(buffer.getvalue()).decode()
