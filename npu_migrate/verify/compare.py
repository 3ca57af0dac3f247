"""Two runs compared: every module's outputs (tensors.py), the module whose code makes the first
difference (blame.py), the training steps (training.py), warnings that weaken a verdict, and the
memory table."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from npu_migrate.verify.blame import blame_by_inputs, drifted, grown, judge_own_code, origin
from npu_migrate.verify.protocol import SideReport
from npu_migrate.verify.tensors import DTYPE_RTOL, Row, Thresholds, compare_tensors, dtype_name
from npu_migrate.verify.training import BACKWARD_FACTOR, compare_steps, dropout_asked

# Elementwise modules whose inputs stay within this |x| hide approximations (_narrow_inputs)
NARROW_SPREAD = 1.0
SPREAD_SAMPLE = 1 << 20  # elements of an input its spread is read from


@dataclass
class Comparison:
    rows: list[Row]
    only_original: list[str]
    only_migrated: list[str]
    first_divergence: str | None
    output_rows: list[Row]
    # each module's own code on the original's inputs (replay.py): its outputs (`module` is the
    # module) and what it hands the modules it calls (`handed`)
    own_rows: list[Row] = field(default_factory=list)
    onnx_rows: list[Row] = field(default_factory=list)  # the ONNX model's outputs against the original's
    onnx: dict[str, Any] | None = None  # opset, operator counts, or the export error
    steps: list[dict[str, Any]] = field(default_factory=list)
    memory: dict[str, Any] = field(default_factory=dict)
    passed: bool = True
    problems: list[str] = field(default_factory=list)
    rule: str = ""  # which verdict rule the rows were held to, in words
    warnings: list[str] = field(default_factory=list)  # what weakens the verdict without failing it
    culprit: str | None = None  # verify TREE: the change of the migration that makes the difference
    drifted: list[str] = field(default_factory=list)  # rows past tolerance by accumulated rounding only
    loss_rtol: float = 0.0  # the steps' loss tolerance

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def evidence(self) -> tuple[str, list[Row]]:
        """What a FAIL rests on, to be shown first: the blamed module's failing own-code rows
        (its code run on the original's inputs), else the failing end-to-end rows; with a title."""
        if self.passed:
            return "", []
        own = [row for row in self.own_rows if not row.passed and row.module == self.first_divergence]
        if own:
            return f"evidence: {self.first_divergence}'s own code, given the original's inputs", own
        failing = [row for row in self.forward_rows() if not row.passed and row.key not in self.drifted]
        return ("evidence: the module outputs that differ", failing) if failing else ("", [])

    def forward_rows(self) -> list[Row]:
        """The module outputs and the model's outputs, each tensor once: the model's outputs
        are also the top module's, where the model is called once."""
        top = {row.key.removeprefix("(model)") for row in self.rows if row.module == "(model)"}
        return self.rows + [row for row in self.output_rows if row.key.removeprefix("output") not in top]


def compare_runs(original: SideReport, migrated: SideReport, limits: Thresholds) -> Comparison:
    given = limits
    same = same_hardware(limits.rule, original.backing, migrated.backing)
    coarsest = _coarsest(original, limits)
    limits, forward_dtype = _computed_in(limits, original)
    theirs = {key: (module, tensor) for key, module, tensor in migrated.rows}
    ours = {key for key, _, _ in original.rows}
    computed_in = original.computed_in
    rows = [
        compare_tensors(key, module, tensor, theirs[key][1], limits, same, computed_in=computed_in.get(key))
        for key, module, tensor in original.rows
        if key in theirs
    ]
    output_rows = [  # the model's outputs are the top module's
        compare_tensors(
            f"output{path}", "(output)", a, b, limits, same, computed_in=computed_in.get(f"(model){path}")
        )
        for (path, a), (_, b) in zip(original.output, migrated.output, strict=False)
    ]
    own_rows = judge_own_code(original, migrated, limits, same)
    first, between = origin(own_rows)
    drift: list[Row] = []
    if first is None:
        drift = drifted(rows + output_rows, own_rows, coarsest)
        excused = {row.key for row in drift}
        rest = [row for row in rows if row.key not in excused]
        first, between = grown(rest, own_rows) or blame_by_inputs(
            rest, original.inputs, migrated.inputs, limits, same
        )
    onnx = original.onnx
    comparison = Comparison(
        rows=rows,
        only_original=sorted({m for k, m, _ in original.rows if k not in theirs}),
        only_migrated=sorted({m for k, (m, _) in theirs.items() if k not in ours}),
        first_divergence=first,
        output_rows=output_rows,
        own_rows=own_rows,
        onnx_rows=[
            compare_tensors(f"onnx{path}", "(onnx)", a, b.to(a.dtype), limits)
            for (path, a), b in zip(original.output, onnx["outputs"], strict=False)
        ]
        if onnx and "outputs" in onnx
        else [],
        onnx={k: v for k, v in onnx.items() if k != "outputs"} if onnx else None,
    )
    comparison.rule = (
        f"tight ({original.backing} vs {migrated.backing}): at least {limits.within_share:.1%} of "
        "each tensor's elements within the dtype's tolerance"
        + (f" (at least {forward_dtype}'s, which the forward computes in)" if forward_dtype else "")
        + ", dtypes equal"
        + _through_half(rows + output_rows + own_rows)
        if same
        else f"msprobe ({original.backing} vs {migrated.backing}): cosine and max-abs thresholds, "
        "dtypes equal"
    )
    comparison.warnings += [
        f"weights paired by shape: {line} (verify's guess; the module outputs of the parts are only "
        "in the original)"
        for line in migrated.fused_weights
    ]
    drawn = sorted(set(original.random) | set(migrated.random))
    if drawn:
        comparison.warnings.append(
            f"the model draws random numbers as it runs ({', '.join(drawn)}): both sides start from the "
            "same seed, but where an operator changed they draw differently, and differ by chance"
        )
    narrow = _narrow_inputs(original)
    if narrow:
        module, spread = narrow[0]
        comparison.warnings.append(
            f"{len(narrow)} elementwise module(s) see only inputs within |x| < {NARROW_SPREAD:g} (such as "
            f"{module}: 99.9% within {spread:.2g}), where approximations agree (GELU's tanh form and erf "
            "differ in 0.05% of elements at a fresh init's spread, in 30% at unit variance): "
            "--realistic-weights reruns at a trained model's spread, the same weights on both sides"
        )
    constant = [r.key for r in rows + output_rows if r.uninformative]
    if constant:
        comparison.warnings.append(
            f"{len(constant)} compared tensor(s) are constant in the original (such as {constant[0]}): "
            "their agreement proves little; perturb the weights the entry builds (README)"
        )
    training = step_limits(given, original)
    comparison.loss_rtol = training.loss_rtol
    comparison.steps = compare_steps(original, migrated, training, same)
    noise = max((step["noise_elements"] for step in comparison.steps), default=0)
    if noise:
        resynced = (
            f"; after each step the migrated side gave them the original's values and optimizer state "
            f"({', '.join(map(str, migrated.resynced))} element(s) by step), so that the next step starts "
            "from the same parameters"
            if any(migrated.resynced)
            else ""
        )
        comparison.warnings.append(
            f"{noise} parameter element(s) had gradients within rounding of zero (a key bias before "
            "softmax has none in exact arithmetic): Adam-like optimizers turn that noise into full "
            f"steps, so their values after a step are not compared (their gradients are){resynced}"
        )
    comparison.memory = _memory(original, migrated)
    problems = list(migrated.state_mismatch)
    if first is not None:
        if all(row.passed for row in rows + output_rows):  # only its own code, replayed, shows it
            what = f"{first}'s own code differs, given the original's inputs, within the end-to-end tolerance"
        else:
            what = f"module outputs diverge first at {first}"
        problems.append(what + (f" ({between})" if between else ""))
    comparison.drifted = [row.key for row in drift]
    if drift:
        comparison.warnings.append(
            f"{len(drift)} module output(s) differ end to end beyond {coarsest}'s tolerance (such as "
            f"{drift[0].key}), but every module's own code agrees given the original's inputs: rounding "
            f"in {coarsest} accumulates along the network"
        )
    if any(not r.passed for r in output_rows if r not in drift):
        problems.append("the model outputs differ")
    if any(not r.passed for r in comparison.onnx_rows):
        problems.append("the ONNX export computes different outputs")
    bad = next((s for s in comparison.steps if not s["passed"]), None)
    if bad is not None:
        problems.append(_training_problem(bad, comparison.first_divergence))
    if original.steps and migrated.steps:
        problems += dropout_asked(original.dropout, migrated.dropout)
    ratio = comparison.memory.get("peak_ratio")
    if limits.max_memory_ratio is not None and ratio is not None and ratio > limits.max_memory_ratio:
        problems.append(f"peak memory ratio {ratio:.2f} exceeds {limits.max_memory_ratio}")
    comparison.problems = problems
    comparison.passed = not problems
    return comparison


def _training_problem(step: dict[str, Any], forward: str | None) -> str:
    """Where training first diverges, in words. After a forward that already differs, every
    gradient does, and none is where the difference starts; otherwise the failing gradient
    nearest the loss (the last parameter, in registration order, the backward reaches first),
    else the state or the update the step leaves."""
    where = f"training diverges at step {step['step']}"
    if forward is not None:
        return f"{where}, after the forward's divergence at {forward}"
    first = (
        (step["one_sided_grads"] and f"gradient of {step['one_sided_grads'][0]}")
        or (step["failed_grads"] and f"gradient of {step['failed_grads'][-1]} (the nearest the loss)")
        or (step["failed_state"] and step["failed_state"][0])
        or (step["failed_updates"] and f"the step's update to {step['failed_updates'][0]}")
        or f"the loss ({step['loss_original']:.6g} vs {step['loss_migrated']:.6g})"
    )
    return where + (f", first at {first}" if first else "")


def _narrow_inputs(original: SideReport) -> list[tuple[str, float]]:
    """Elementwise modules (leaves without parameters whose first output has its first input's
    shape and differs from it: GELU, SiLU, not Dropout in eval) whose first input stays within
    |x| < NARROW_SPREAD in 99.9% of its elements, with that spread."""
    inputs = {module: tensor for _, module, tensor in reversed(original.inputs)}  # each module's first
    outputs = {module: tensor for _, module, tensor in reversed(original.rows)}
    narrow = []
    for module in original.elementwise:
        x, y = inputs.get(module), outputs.get(module)
        if x is None or y is None or x.shape != y.shape or not x.is_floating_point() or not x.numel():
            continue
        if torch.equal(x, y):
            continue
        spread = float(torch.quantile(x.detach().flatten()[:SPREAD_SAMPLE].abs().double(), 0.999))
        if spread < NARROW_SPREAD:
            narrow.append((module, spread))
    return narrow


def _through_half(rows: list[Row]) -> str:
    """The rule's words for rows judged by the coarser dtype their computation ran in."""
    through: dict[str, int] = {}
    for row in rows:
        if row.computed_in:
            through[row.computed_in] = through.get(row.computed_in, 0) + 1
    if not through:
        return ""
    counts = ", ".join(f"{count} through {dtype}" for dtype, count in through.items())
    return (
        f"; rows computed through a coarser dtype than their own (the model casts to it around an "
        f"operator) are judged by that dtype's rounding ({counts})"
    )


def same_hardware(rule: str, original: str, migrated: str) -> bool:
    """Whether the tight rule judges two sides that computed on these backings (`--rule`)."""
    return rule == "tight" or (rule == "auto" and original == migrated)


def step_limits(limits: Thresholds, original: SideReport) -> Thresholds:
    """The tolerances of training steps: the backward runs through whatever the forward computed
    in, so gradients are held to BACKWARD_FACTOR times the tolerance of the least precise dtype
    it computed in; the loss, a mean over many elements, carries that rounding averaged, and is
    held to the loss tolerance times the square root of how much coarser the dtype is than
    float32."""
    limits, forward_dtype = _computed_in(limits, original)
    through = max(original.computed_in.values(), key=lambda d: limits.dtype_rtol.get(d, 0.0), default="")
    floor = limits.dtype_rtol.get(through, 0.0)
    coarse = max(floor, limits.dtype_rtol.get(forward_dtype, 0.0))
    return replace(
        limits,
        dtype_rtol={d: BACKWARD_FACTOR * max(r, floor) for d, r in limits.dtype_rtol.items()},
        loss_rtol=limits.loss_rtol * max(1.0, math.sqrt(coarse / DTYPE_RTOL["float32"])),
    )


def _coarsest(original: SideReport, limits: Thresholds) -> str:
    """The least precise floating-point dtype among the forward's module outputs."""
    computed = {dtype_name(t) for _, _, t in original.rows if t.is_floating_point()}
    return max(computed, key=lambda d: limits.dtype_rtol.get(d, 0.0), default="")


def _computed_in(limits: Thresholds, original: SideReport) -> tuple[Thresholds, str]:
    """Tolerances no finer than that of the least precise dtype among the forward's module
    outputs, and that dtype where it coarsens any: under autocast a float32 tensor made from
    bfloat16 matmuls is only as exact as bfloat16."""
    computed = {dtype_name(t) for _, _, t in original.rows if t.is_floating_point()}
    coarsest = _coarsest(original, limits)
    floor = limits.dtype_rtol.get(coarsest, 0.0)
    if not any(rtol < floor for d, rtol in limits.dtype_rtol.items() if d in computed):
        return limits, ""
    return replace(limits, dtype_rtol={d: max(r, floor) for d, r in limits.dtype_rtol.items()}), coarsest


def _memory(original: SideReport, migrated: SideReport) -> dict[str, Any]:
    def ratio(key: str) -> float | None:
        a, b = getattr(original, key), getattr(migrated, key)
        return b / a if a and b is not None else None

    modules = sorted(set(original.activation_bytes) | set(migrated.activation_bytes))
    return {
        "peak_original": original.peak_bytes,
        "peak_migrated": migrated.peak_bytes,
        "peak_ratio": ratio("peak_bytes"),
        "parameters_original": original.parameter_bytes,
        "parameters_migrated": migrated.parameter_bytes,
        "optimizer_original": original.optimizer_bytes,
        "optimizer_migrated": migrated.optimizer_bytes,
        "optimizer_ratio": ratio("optimizer_bytes"),
        "activations": {
            m: [original.activation_bytes.get(m, 0), migrated.activation_bytes.get(m, 0)] for m in modules
        },
        "forward_ms": [original.forward_ms, migrated.forward_ms],
    }
