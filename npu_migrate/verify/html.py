"""A self-contained HTML report of a verify run: summary, plots (error along the network's
depth, loss curves, memory bars) embedded as PNG, and every compared row."""

from __future__ import annotations

import base64
import html
import io
import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

from npu_migrate.verify.orchestrate import Result

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 2em; }
.pass { color: #1a7f37; font-weight: bold; } .fail { color: #cf222e; font-weight: bold; }
table { border-collapse: collapse; font-size: 0.85em; }
td, th { padding: 2px 8px; border-bottom: 1px solid #ddd; }
td.num { text-align: right; font-variant-numeric: tabular-nums; } tr.bad { background: #fff0f0; }
img { max-width: 100%; }
"""


def _png(figure: plt.Figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    return f'<img alt="plot" src="data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}">'


_DEPTH_LABELS = 40  # module names under the depth plot, at most (every n-th one beyond)


def _depth_plot(rows: list[Any]) -> str:
    figure, axis = plt.subplots(figsize=(10, 4.2))
    errors = [max(1 - r.cosine, 1e-12) for r in rows]
    axis.semilogy(range(len(rows)), errors, marker=".", linewidth=1, label="1 - cosine")
    axis.semilogy(range(len(rows)), [max(r.max_abs, 1e-12) for r in rows], linewidth=1, label="max abs error")
    outside = [max(1 - r.within_dtype_tol, 1e-12) for r in rows]
    axis.semilogy(
        range(len(rows)), outside, linewidth=1, linestyle=":", label="share outside dtype tolerance"
    )
    bad = [i for i, r in enumerate(rows) if not r.passed]
    axis.scatter(bad, [errors[i] for i in bad], color="red", zorder=3, label="fails")
    every = max(1, math.ceil(len(rows) / _DEPTH_LABELS))
    ticks = list(range(0, len(rows), every))
    axis.set_xticks(ticks, [rows[i].key for i in ticks], rotation=90, fontsize=7)
    axis.set_xlabel("module output, in execution order")
    axis.set_title("error along the network's depth")
    axis.legend(loc="lower right", fontsize=8)
    return _png(figure)


def _loss_plot(steps: list[dict[str, Any]]) -> str:
    figure, axis = plt.subplots(figsize=(6, 3))
    numbers = [s["step"] for s in steps]
    axis.plot(numbers, [s["loss_original"] for s in steps], marker="o", label="original")
    axis.plot(numbers, [s["loss_migrated"] for s in steps], marker="x", linestyle="--", label="migrated")
    axis.set_xlabel("step")
    axis.set_ylabel("loss")
    axis.set_title("loss per training step")
    axis.legend()
    return _png(figure)


def _memory_plot(memory: dict[str, Any]) -> str:
    labels, original, migrated = [], [], []
    for label, key in (("peak", "peak"), ("parameters", "parameters"), ("optimizer", "optimizer")):
        a, b = memory.get(f"{key}_original"), memory.get(f"{key}_migrated")
        if a is not None and b is not None:
            labels.append(label)
            original.append(a / 2**20)
            migrated.append(b / 2**20)
    figure, axis = plt.subplots(figsize=(6, 3))
    positions = range(len(labels))
    axis.bar([p - 0.2 for p in positions], original, width=0.4, label="original")
    axis.bar([p + 0.2 for p in positions], migrated, width=0.4, label="migrated")
    axis.set_xticks(list(positions), labels)
    axis.set_ylabel("MiB")
    axis.set_title("memory")
    axis.legend()
    return _png(figure)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.6g}"
    return html.escape(str(value))


def write_html(path: Path, result: Result) -> None:
    comparison = result.comparison
    rows = comparison.rows + comparison.output_rows + comparison.onnx_rows
    verdict = '<span class="pass">PASS</span>' if comparison.passed else '<span class="fail">FAIL</span>'
    sides = " vs ".join(
        f"{name} {html.escape(side.where)}"
        for name, side in (("original", result.original), ("migrated", result.migrated))
    )
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>npu-migrate verify</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>npu-migrate verify: {verdict}</h1><p>{sides}</p>",
        f"<p>rule: {html.escape(comparison.rule)}</p>",
        "<ul>"
        + "".join(
            f"<li>{html.escape(p)}</li>"
            for p in [*comparison.problems, *([comparison.culprit] if comparison.culprit else [])]
        )
        + "".join(f"<li>warning: {html.escape(w)}</li>" for w in comparison.warnings)
        + "</ul>",
    ]
    if comparison.rows:
        parts += ["<h2>Numerics along the network</h2>", _depth_plot(comparison.rows)]
    if comparison.steps:
        parts += ["<h2>Training</h2>", _loss_plot(comparison.steps)]
    parts += ["<h2>Memory</h2>", _memory_plot(comparison.memory)]
    columns = [
        "key",
        "dtype",
        "shape",
        "cosine",
        "max_abs",
        "max_rel",
        "rmse",
        "within_1e3",
        "within_5e3",
        "within_dtype_tol",
        "dtype_migrated",
        "passed",
    ]
    parts.append(
        "<h2>Every compared tensor</h2><table><tr>" + "".join(f"<th>{c}</th>" for c in columns) + "</tr>"
    )
    for row in rows:
        values = [getattr(row, c) for c in columns]
        cells = "".join(f"<td{' class=num' if isinstance(v, float) else ''}>{_cell(v)}</td>" for v in values)
        parts.append(f"<tr class='{'' if row.passed else 'bad'}'>{cells}</tr>")
    parts.append("</table></body></html>")
    path.write_text("\n".join(parts), encoding="utf-8")
