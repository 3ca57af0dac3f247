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

from npu_migrate import __version__
from npu_migrate.verify.orchestrate import Result
from npu_migrate.verify.report import (
    guard_tally,
    headline,
    mib,
    ranks_line,
    ratio,
    reference_lines,
    step_failures,
    tally,
    tensor_name,
)

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 2em; }
h1.pass { color: #1a7f37; } h1.fail { color: #cf222e; } li.warning { color: #7d4e00; }
table { border-collapse: collapse; font-size: 0.85em; }
thead th { position: sticky; top: 0; background: #f6f8fa; }
td, th { padding: 2px 8px; border-bottom: 1px solid #ddd; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; } tr.bad { background: #fff0f0; }
tr.blamed td { font-weight: bold; border-top: 2px solid #cf222e; border-bottom: 2px solid #cf222e; }
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
    labels = [rows[i].key.replace("$", r"\$") for i in ticks]  # a name, never mathtext (`$\euro$`)
    axis.set_xticks(ticks, labels, rotation=90, fontsize=7)
    axis.set_xlabel("module output, in execution order")
    axis.set_title("error along the network's depth")
    axis.legend(loc="lower right", fontsize=8)
    return _png(figure)


def _difference_plot(steps: list[dict[str, Any]], loss_rtol: float) -> str:
    """How far apart the sides are, step by step, on a log scale against the loss tolerance:
    two loss curves drawn over each other hide a difference of 1e-5."""
    figure, axis = plt.subplots(figsize=(6, 3))
    numbers = [s["step"] for s in steps]

    def relative(key: str) -> list[float]:
        pairs = [(s[f"{key}_original"], s[f"{key}_migrated"]) for s in steps]
        return [max(abs(b - a) / max(abs(a), 1e-30), 1e-12) for a, b in pairs]

    axis.semilogy(numbers, relative("loss"), marker="o", label="loss")
    axis.semilogy(numbers, relative("grad_norm"), marker="x", label="gradient norm")
    axis.axhline(loss_rtol, color="grey", linestyle="--", label="loss tolerance")
    axis.set_xticks(numbers)
    axis.set_xlabel("step")
    axis.set_ylabel("|migrated - original| / |original|")
    axis.set_title("difference per training step")
    axis.legend(fontsize=8)
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


def _table(header: list[str], rows: list[list[Any]], classes: list[str] | None = None) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = []
    for index, row in enumerate(rows):
        cells = "".join(f"<td{' class=num' if isinstance(v, float) else ''}>{_cell(v)}</td>" for v in row)
        kind = classes[index] if classes else ""
        body.append(f"<tr class='{kind}'>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _section(anchor: str, title: str, *content: str) -> list[str]:
    return [f"<section id='{anchor}'><h2>{html.escape(title)}</h2>", *content, "</section>"]


def _compared(result: Result) -> list[str]:
    """What ran against what: the trees, the entry's sides, the command, the versions."""
    comparison = result.comparison
    rows = [
        ["original tree", result.trees[0]],
        ["migrated tree", result.trees[1]],
        ["original ran", result.original.where],
        ["migrated ran", result.migrated.where],
        ["rule", comparison.rule],
        ["command", result.command or "-"],
    ]
    ranks = ranks_line(result)
    if ranks:
        rows.insert(4, ["ranks (torchrun)", ranks])
    for side, report in (("original", result.original), ("migrated", result.migrated)):
        rows.append([f"{side} versions", ", ".join(f"{k} {v}" for k, v in report.versions.items()) or "-"])
    rows.append(["npu-migrate", __version__])
    rows += [["original's reference", line] for line in reference_lines(result)]
    if result.migrated.fused_calls:
        rows.append(["fused operators run", tally(result.migrated.fused_calls)])
    rows += [[f"guarded swap at {site}", guard_tally(runs)] for site, runs in result.migrated.guarded.items()]
    return _section("compared", "What was compared", _table(["", ""], rows))


def _steps(comparison: Any) -> list[str]:
    header = ["step", "loss original", "loss migrated", "grad norm original", "grad norm migrated", "verdict"]
    rows, classes = [], []
    for step in comparison.steps:
        verdict = "ok" if step["passed"] else "fail: " + (", ".join(step_failures(step)[:5]) or "the loss")
        values = [
            step[k] for k in ("loss_original", "loss_migrated", "grad_norm_original", "grad_norm_migrated")
        ]
        rows.append([step["step"], *values, verdict])
        classes.append("" if step["passed"] else "bad")
    return _section(
        "training",
        "Training steps",
        _table(header, rows, classes),
        _difference_plot(comparison.steps, comparison.loss_rtol),
    )


def _memory(memory: dict[str, Any]) -> list[str]:
    rows = [
        [
            label,
            mib(memory.get(f"{key}_original")),
            mib(memory.get(f"{key}_migrated")),
            ratio(memory.get(key_ratio)),
        ]
        for label, key, key_ratio in (
            ("peak", "peak", "peak_ratio"),
            ("parameters", "parameters", ""),
            ("optimizer state", "optimizer", "optimizer_ratio"),
        )
    ]
    largest = sorted(memory["activations"].items(), key=lambda item: -max(item[1]))[:8]
    rows += [[f"activations {m}", mib(a), mib(b), ratio(b / a if a else None)] for m, (a, b) in largest]
    return _section(
        "memory", "Memory", _table(["", "original", "migrated", "ratio"], rows), _memory_plot(memory)
    )


def _tensors(comparison: Any) -> list[str]:
    """Every compared tensor, the blamed module's rows marked, with its own code's verdict
    (replayed on the original's inputs) beside the end-to-end one."""
    own: dict[str, bool] = {}
    for row in comparison.own_rows:
        own[row.module] = own.get(row.module, True) and row.passed
    header = ["module output", "module", "dtype", "shape", "cosine", "max abs", "max rel",
              "within dtype tol", "own code", "end to end"]  # fmt: skip
    rows, classes = [], []
    for row in comparison.forward_rows() + comparison.onnx_rows:
        blamed = row.module == comparison.first_divergence
        own_verdict = "-" if row.module not in own else "ok" if own[row.module] else "fail"
        verdict = (
            "ok" if row.passed else "drift" if row.key in comparison.drifted else f"fail {row.note}".strip()
        )
        dtype = f"{row.dtype} vs {row.dtype_migrated}" if row.dtype_migrated else row.dtype
        module = f"{row.module} ◀ first divergence" if blamed else row.module
        shape = "x".join(map(str, row.shape))
        numbers = [row.cosine, row.max_abs, row.max_rel, f"{row.within_dtype_tol:.1%}"]
        rows.append([row.key, module, dtype, shape, *numbers, own_verdict, verdict])
        classes.append(" ".join(filter(None, ["blamed" if blamed else "", "" if row.passed else "bad"])))
    return _section("tensors", "Every compared tensor", _table(header, rows, classes))


def _evidence(comparison: Any) -> list[str]:
    """What the FAIL rests on, before anything else (Comparison.evidence)."""
    title, rows = comparison.evidence()
    if not rows:
        return []
    header = ["tensor", "module", "dtype", "cosine", "max abs", "max rel", "within dtype tol", "verdict"]
    table = [
        [
            tensor_name(row), row.module, row.dtype, row.cosine,
            row.max_abs, row.max_rel, f"{row.within_dtype_tol:.1%}", f"fail {row.note}".strip(),
        ]
        for row in rows
    ]  # fmt: skip
    return _section("evidence", title[0].upper() + title[1:], _table(header, table, ["bad"] * len(table)))


def _forecast(result: Result) -> list[str]:
    """What a real NPU will do with the migrated model (--forecast), ranked by expected harm."""
    forecast = result.forecast
    if forecast is None:
        return []
    rows = [[f.kind, f.title, ", ".join(f.sites), f.detail] for f in forecast.findings]
    found = _table(["kind", "finding", "where", "why"], rows) if rows else "<p>nothing found</p>"
    return _section(
        "forecast",
        f"What the NPU will do with it (torch_npu {forecast.torch_npu}, Ascend {forecast.chip})",
        found,
    )


def write_html(path: Path, result: Result) -> None:
    """The report as one file: every image embedded, no script, readable offline."""
    comparison = result.comparison
    verdict = "pass" if comparison.passed else "fail"
    items = [*comparison.problems, *([comparison.culprit] if comparison.culprit else [])]
    listed = "".join(f"<li>{html.escape(p)}</li>" for p in items)
    listed += "".join(f"<li class='warning'>warning: {html.escape(w)}</li>" for w in comparison.warnings)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>npu-migrate verify</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1 id='verdict' class='{verdict}'>{html.escape(headline(comparison))}</h1>",
        *(_section("problems", "Problems and warnings", f"<ul>{listed}</ul>") if listed else []),
        *_evidence(comparison),
        *_compared(result),
    ]
    if result.changes:
        rows = [[code, count] for code, count in result.changes.items()]
        parts += _section("changes", "The migration's changes, by rule", _table(["rule", "changes"], rows))
    if comparison.rows:
        parts += _section("numerics", "Numerics along the network", _depth_plot(comparison.rows))
    if comparison.steps:
        parts += _steps(comparison)
    parts += _memory(comparison.memory)
    parts += _forecast(result)
    parts += _tensors(comparison)
    parts.append("</body></html>")
    path.write_text("\n".join(parts), encoding="utf-8")
