"""What verify shows: a terminal summary (verdict, first divergence, worst rows, training,
memory) and the full JSON."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from npu_migrate.verify.blame import MORE_CALLS
from npu_migrate.verify.compare import Comparison
from npu_migrate.verify.orchestrate import Result
from npu_migrate.verify.tensors import Row


def mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:.2f} MiB"


def ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def tally(counts: dict[str, int]) -> str:
    """`name xN, ...`: operators by how often they appear or ran."""
    return ", ".join(f"{name} x{count}" for name, count in counts.items())


def guard_tally(outcomes: dict[str, int]) -> str:
    """`fused 3 of 5; fell back 2 (not on the NPU)`: how a guarded swap's runs went."""
    runs = sum(outcomes.values())
    parts = [f"fused {outcomes.get('fused', 0)} of {runs}"]
    parts += [f"fell back {count} ({why})" for why, count in outcomes.items() if why != "fused"]
    return "; ".join(parts)


def _number(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.3g}"


PIPED_WIDTH = 240  # a table's most columns when the output is not a terminal


def _print_table(console: Console, table: Table) -> None:
    """A table as wide as its content where the output is piped or saved (a terminal's width
    folds module names across lines, and a log has no width to fit)."""
    if console.is_terminal:
        console.print(table)
    else:  # a console's own width bounds any it prints at: a wider one on the same file
        Console(
            file=console.file, width=PIPED_WIDTH, highlight=False, no_color=console.no_color, emoji=False
        ).print(table)


def step_failures(step: dict[str, Any]) -> list[str]:
    """What failed in a training step, in words: gradients, then state, then updates."""
    failed = [
        f"gradient of {row['key']} (cosine {row['cosine']:.6f}, "
        f"{row['within_dtype_tol']:.1%} of its elements within tolerance)"
        for row in step.get("failed_grad_rows", [])
    ]
    failed += [f"gradient of {name}" for name in step["one_sided_grads"]]
    failed += step["failed_state"]
    return failed + [f"update to {name}" for name in step["failed_updates"]]


def headline(comparison: Comparison) -> str:
    """The verdict and what it rests on, in one line: each tensor counted once, and a failure
    that no tensor shows (a missing weight, a training step) not called agreement."""
    rows = comparison.forward_rows()
    failed = [row for row in rows if not row.passed and row.key not in comparison.drifted]
    if failed:
        forward = f"{len(failed)} of the forward's {len(rows)} compared tensors differ"
    else:
        forward = f"the forward's {len(rows)} compared tensors agree"
        if comparison.drifted:
            forward += f" ({len(comparison.drifted)} within the rounding their modules accumulate)"
    bad = [step["step"] for step in comparison.steps if not step["passed"]]
    if bad:
        forward += f"; training diverges at step {bad[0]} of {len(comparison.steps)}"
    elif comparison.steps:
        forward += f"; the {len(comparison.steps)} training steps agree"
    if comparison.passed:
        return f"PASS: {forward}"
    return f"FAIL: {forward}" + ("" if failed or bad else "; but:")


def ranks_line(result: Result) -> str | None:
    """Under --nproc: which rank the report shows and which ranks diverge, in words."""
    if result.rank is None:
        return None
    count = len(result.ranks)
    failing = [str(number) for number, comparison in enumerate(result.ranks) if not comparison.passed]
    if not failing:
        return f"each of the {count} ranks agrees; rank {result.rank}'s comparison follows"
    return (
        f"rank {result.rank} of {count} diverges first (diverging: {'ranks' if failing[1:] else 'rank'} "
        f"{', '.join(failing)}); "
        "its comparison follows"
    )


def reference_lines(result: Result) -> list[str]:
    """What the original ran on in place of CUDA: the libraries' stand-ins, the asserts answered."""
    lines = []
    if result.original.stand_ins:
        names = ", ".join(result.original.stand_ins)
        lines.append(f"the original imported npu-migrate's plain-torch stand-ins for: {names}")
    lines += [f"answered on the original side (no CUDA): {where}" for where in result.original.answered]
    return lines


def tensor_name(row: Row) -> str:
    """A row's tensor in words: `blocks.0.attn`, or `input [0][0] handed to blocks.0.proj` (an
    own-code row of what a module hands a callee)."""
    if not row.handed:
        return row.key
    if row.key.endswith(MORE_CALLS):
        return f"the calls of {row.key.removesuffix(MORE_CALLS)}"
    callee, bracket, position = row.key.partition("[")
    return f"input {bracket}{position} handed to {callee}"


def _rows_table(title: str, rows: list[Row]) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("tensor", overflow="fold")
    for column in ("dtype", "cosine", "max abs", "max rel", "≤1e-3", "verdict"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in rows:
        verdict = "[green]ok[/]" if row.passed else f"[red]fail[/] {escape(row.note)}"
        numbers = [f"{row.cosine:.6f}", _number(row.max_abs), _number(row.max_rel), f"{row.within_1e3:.1%}"]
        dtype = f"{row.dtype}→{row.dtype_migrated}" if row.dtype_migrated else row.dtype
        table.add_row(escape(tensor_name(row)), dtype, *numbers, verdict)
    return table


def print_result(console: Console, result: Result, worst: int = 8) -> None:
    comparison = result.comparison
    world = f", {len(result.ranks)} ranks each under torchrun" if result.ranks else ""
    console.print(f"original {result.original.where} vs migrated {result.migrated.where}{world}")
    for line in reference_lines(result):
        console.print(f"  {line}", markup=False)
    if result.migrated.fused_calls:
        calls = tally(result.migrated.fused_calls)
        console.print(f"  fused operators the migrated side ran (forwards and steps): {calls}")
    for site, outcomes in result.migrated.guarded.items():
        console.print(f"  guarded swap at {site}: {guard_tally(outcomes)}", markup=False)
    rows = comparison.forward_rows()
    verdict, _, rest = headline(comparison).partition(":")
    console.print(f"[{'green' if comparison.passed else 'red'}]{verdict}[/]:{rest}")
    ranks = ranks_line(result)
    if ranks:
        console.print(f"  ranks: {ranks}")
    console.print(f"  rule: {comparison.rule}")
    for problem in comparison.problems:
        console.print(f"  - {problem}")
    for warning in comparison.warnings:
        console.print(f"  [yellow]warning[/]: {warning}")
    if comparison.culprit:
        console.print(f"  - {comparison.culprit}", markup=False)
    title, evidence = comparison.evidence()
    if comparison.passed:  # the closest calls, for what a pass rests on
        title, evidence = "worst module outputs", sorted(rows, key=lambda r: (r.cosine, -r.max_rel))[:worst]
    if evidence:  # under a FAIL only what fails: a table of agreeing rows would read as the answer
        _print_table(console, _rows_table(title, evidence[:worst]))
        if len(evidence) > worst:
            console.print(f"  and {len(evidence) - worst} more (--json, --html)")
    for side, names in (("original", comparison.only_original), ("migrated", comparison.only_migrated)):
        if names:
            console.print(f"modules only in the {side}: {', '.join(names)}")
    if comparison.steps:
        steps = Table(title="training steps", title_justify="left")
        for column in (
            "step",
            "loss original",
            "loss migrated",
            "grad norm original",
            "grad norm migrated",
            "ms original / migrated",
        ):
            steps.add_column(column, justify="right")
        steps.add_column("verdict", overflow="fold")
        for step in comparison.steps:
            failed = step_failures(step)
            verdict = "[green]ok[/]" if step["passed"] else f"[red]fail[/] {', '.join(failed[:3])}"
            values = [
                step[k]
                for k in ("loss_original", "loss_migrated", "grad_norm_original", "grad_norm_migrated")
            ]
            time = f"{step['ms_original']:.1f} / {step['ms_migrated']:.1f}"
            steps.add_row(str(step["step"]), *(f"{v:.6g}" for v in values), time, verdict)
        _print_table(console, steps)
        console.print(
            f"  each step compares the loss, the gradients, {comparison.steps[0]['state_compared']} "
            "parameters, buffers and optimizer states, and what the step changed in each parameter "
            "and buffer (against the size of the change); dropout is off on both sides (modules, "
            "F.dropout, SDPA's dropout_p, npu_fusion_attention's keep_prob), and the probabilities "
            "each call site asked for are compared instead"
        )
    if comparison.onnx is not None:
        _print_onnx(console, comparison)
    memory = comparison.memory
    figures = Table(title="memory and time", title_justify="left")
    for column in ("", "original", "migrated", "ratio"):
        figures.add_column(column, justify="right")
    figures.add_row(
        "peak", mib(memory["peak_original"]), mib(memory["peak_migrated"]), ratio(memory["peak_ratio"])
    )
    figures.add_row("parameters", mib(memory["parameters_original"]), mib(memory["parameters_migrated"]), "")
    figures.add_row("optimizer state", mib(memory["optimizer_original"]), mib(memory["optimizer_migrated"]),
                    ratio(memory["optimizer_ratio"]))  # fmt: skip
    largest = sorted(memory["activations"].items(), key=lambda item: -max(item[1]))[:5]
    for module, (a, b) in largest:
        figures.add_row(f"activations {module}", mib(a), mib(b), ratio(b / a if a else None))
    original_ms, migrated_ms = memory["forward_ms"]
    emulated = result.migrated.emulated
    figures.add_row(
        "forward (median of 5, warmed up)",
        f"{original_ms:.2f} ms",
        f"{migrated_ms:.2f} ms",
        "not comparable" if emulated else ratio(migrated_ms / original_ms if original_ms else None),
    )
    _print_table(console, figures)
    if emulated:
        console.print(
            "  the migrated side ran on the NPU emulation: its times say nothing of an NPU's, and its "
            "peak is the emulated operators' (which compute the fused attention in blocks, as the "
            "real kernel does)"
        )
    if result.forecast is not None:
        from npu_migrate.forecast.report import text

        console.print(text(result.forecast), markup=False, highlight=False)


def _print_onnx(console: Console, comparison: Any) -> None:
    onnx = comparison.onnx
    if "error" in onnx:
        console.print(f"ONNX export failed: {onnx['error']}")
        return
    console.print(
        f"ONNX: opset {onnx['opset']}, {sum(onnx['operators'].values())} nodes: {tally(onnx['operators'])}"
    )
    for row in comparison.onnx_rows:
        verdict = "[green]ok[/]" if row.passed else "[red]fail[/]"
        console.print(
            f"  {row.key} vs original: cosine {row.cosine:.6f}, max abs {_number(row.max_abs)} {verdict}"
        )


def write_json(path: Path, result: Result) -> None:
    data = {
        "passed": result.comparison.passed,
        "original": {
            "device": result.original.device,
            "emulated": result.original.emulated,
            "dropout": result.original.dropout,
            "stand_ins": result.original.stand_ins,
            "answered": result.original.answered,
        },
        "migrated": {
            "device": result.migrated.device,
            "emulated": result.migrated.emulated,
            "fused_calls": result.migrated.fused_calls,
            "fused_sites": result.migrated.fused_sites,
            "guarded": result.migrated.guarded,
            "dropout": result.migrated.dropout,
        },
        "trees": {"original": result.trees[0], "migrated": result.trees[1]},
        "command": result.command,
        "changes": result.changes,
        "versions": {"original": result.original.versions, "migrated": result.migrated.versions},
        "rank": result.rank,  # --nproc: the rank whose comparison this is
        "ranks": [
            {"rank": number, "passed": comparison.passed, "problems": comparison.problems}
            for number, comparison in enumerate(result.ranks)
        ],
        **result.comparison.as_dict(),
        "forecast": result.forecast.as_json() if result.forecast is not None else None,
    }
    path.write_text(json.dumps(data, indent=2, default=_plain) + "\n", encoding="utf-8")


def _plain(value: Any) -> Any:
    if isinstance(value, Row):
        return asdict(value)
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return str(value)
