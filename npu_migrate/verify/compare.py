"""Numerics of two runs: per-tensor metrics (msprobe's), verdicts, the first diverging module,
training-step agreement and the memory table."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from npu_migrate.verify.protocol import SideReport

# What reordering the same operations explains, by dtype: a few units in the last place of the
# dtype, relative to each element plus the tensor's root-mean-square (so that elements near zero,
# where a relative error means nothing, are judged against the tensor's scale).
DTYPE_RTOL = {
    "float64": 1e-10, "float32": 1e-4, "float16": 2**-8, "bfloat16": 2**-6,
    "complex128": 1e-10, "complex64": 1e-4,  # complex: the precision of their parts
}  # fmt: skip
# A step's gradients chain the forward's operations and their transposes: held to this many times
# the tolerance of the least precise dtype the forward computed in.
BACKWARD_FACTOR = 4
# Storing a parameter rounds it to its dtype: a step's change read as after - before on the two
# sides may differ by one unit in the last place of the values, up to 2 * eps * |value|.
STORED_ULPS = 2
# A mean shift this many standard errors from zero is not chance (own-code rows, _shift)
SHIFT_SIGMAS = 6
# Elementwise modules whose inputs stay within this |x| hide approximations (_narrow_inputs)
NARROW_SPREAD = 1.0
SPREAD_SAMPLE = 1 << 20  # elements of an input its spread is read from
# Dtypes whose rounding, op after op, adds up past their own tolerance over a network's depth
COARSE = ("bfloat16", "float16")


@dataclass(frozen=True)
class Thresholds:
    """Two rules. Where both sides compute on the same backing (the emulation over the CPU
    against the CPU), a row passes when its dtype matches and at least `within_share` of its
    elements agree within the dtype's tolerance (`dtype_rtol`: |b - a| <= rtol * (|a| +
    rms(a))): tight enough to fail a 1% scale or shift. Across hardware, msprobe's rule: a row
    fails when (cosine < cosine_warn and max_abs > abs_warn) or cosine < cosine_fail or max_abs >
    abs_fail. Either way a row fails when one side alone has NaN or Inf, or the dtypes differ."""

    cosine_warn: float = 0.99
    abs_warn: float = 0.001
    cosine_fail: float = 0.9
    abs_fail: float = 1.0
    loss_rtol: float = 1e-4
    max_memory_ratio: float | None = None
    dtype_rtol: dict[str, float] = field(default_factory=lambda: dict(DTYPE_RTOL))
    within_share: float = 0.999
    rule: str = "auto"  # "tight", "msprobe", or "auto": tight where both sides share a backing


@dataclass
class Row:
    key: str
    module: str
    dtype: str
    shape: list[int]
    cosine: float
    max_abs: float
    max_rel: float
    rmse: float
    within_1e3: float  # share of elements within 1/1000 relative error
    within_5e3: float
    within_dtype_tol: float  # share within the dtype's tolerance (Thresholds.dtype_rtol)
    passed: bool
    note: str = ""
    dtype_migrated: str = ""  # where it differs from the original's
    uninformative: bool = False  # the original is constant (all zeros, say): agreement proves little
    handed: bool = False  # an own-code row (replay.py) of what `module` hands a callee, not returns
    shift: float = 0.0  # own-code rows: the mean relative shift where it is systematic (_shift)


def _flat(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor as one float64 (complex128 for a complex tensor) vector: complex values are
    compared as complex numbers, not by their real part."""
    flat = tensor.detach().flatten()
    return flat.to(torch.complex128) if flat.is_complex() else flat.double()


def _misplaced_specials(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Where either side is NaN or infinite: the positions where both hold the same special value
    (an additive -inf mask on both sides), and those where they do not (a mask off by one, or
    NaN on one side only), which no tolerance excuses."""
    special = ~(torch.isfinite(x) & torch.isfinite(y))
    same = special & ((x == y) | (torch.isnan(x) & torch.isnan(y)))
    return same, special & ~same


def _dtype_name(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def compare_tensors(
    key: str,
    module: str,
    a: torch.Tensor,
    b: torch.Tensor,
    limits: Thresholds,
    same_backing: bool = False,
    scale_floor: float = 0.0,
    shift_check: bool = False,
) -> Row:
    """Metrics of the migrated tensor `b` against the original `a`, and the verdict of the rule
    that fits the comparison (Thresholds). Errors are relative to |a| plus a's rms, or plus
    `scale_floor` where that is larger: the scale of the tensors a gradient is computed among,
    so a gradient that is rounding noise (zero in exact arithmetic) is judged as noise. With
    `shift_check`, a systematic shift of the values (see `_shift`) fails too."""
    dtype = _dtype_name(a)
    if a.shape != b.shape:
        return Row(key, module, dtype, list(a.shape), 0.0, math.inf, math.inf, math.inf, 0, 0, 0, False,
                   f"shape {tuple(a.shape)} vs {tuple(b.shape)}")  # fmt: skip
    x, y = _flat(a), _flat(b)
    other_dtype = _dtype_name(b) if b.dtype != a.dtype else ""
    count = x.numel()
    matched, misplaced = _misplaced_specials(x, y)
    finite = ~(matched | misplaced)
    uninformative = count > 1 and bool((x == x[0]).all())  # a scalar loss is not constant
    x, y = x[finite], y[finite]  # the metrics read the finite values; specials are judged by position
    diff = (x - y).abs()
    norm_x, norm_y = x.norm(), y.norm()
    norms = norm_x * norm_y
    both_zero = norm_x == 0 and norm_y == 0
    cosine = 1.0 if both_zero else float(torch.vdot(x, y).real / norms) if norms > 0 else 0.0
    scale = (x.abs().pow(2).mean().sqrt() if x.numel() else diff.new_zeros(())).clamp_min(scale_floor)
    relative = diff / (x.abs() + scale).clamp_min(torch.finfo(torch.float64).tiny)
    rtol = limits.dtype_rtol.get(dtype, DTYPE_RTOL["float32"])
    specials_agree = int(matched.sum())

    def share_of(within: torch.Tensor) -> float:  # of no elements (all left out as noise): all agree
        return (float(within.sum()) + specials_agree) / count if count else 1.0

    wrong_specials = int(misplaced.sum())
    max_abs = math.inf if wrong_specials else float(diff.max()) if x.numel() else 0.0
    notes = []
    if wrong_specials:
        notes.append(f"NaN/Inf at {wrong_specials} position(s) the other side does not match")
    if other_dtype:
        notes.append(f"dtype {dtype} vs {other_dtype}")
    row = Row(
        key=key,
        module=module,
        dtype=dtype,
        shape=list(a.shape),
        cosine=cosine,
        max_abs=max_abs,
        max_rel=math.inf if wrong_specials else float(relative.max()) if x.numel() else 0.0,
        rmse=float(diff.pow(2).mean().sqrt()) if x.numel() else 0.0,
        within_1e3=share_of(relative <= 1e-3),
        within_5e3=share_of(relative <= 5e-3),
        within_dtype_tol=share_of(relative <= rtol),
        passed=True,
        note="; ".join(notes),
        dtype_migrated=other_dtype,
        uninformative=uninformative,
    )
    if same_backing:
        failed = row.within_dtype_tol < limits.within_share
        row.shift = _shift(x, y, scale, rtol) if shift_check and not x.is_complex() else 0.0
        if row.shift:
            failed = True
            notes.append(f"values shifted by {row.shift:+.2%} on average: systematic, not rounding")
            row.note = "; ".join(notes)
    else:
        failed = (
            (cosine < limits.cosine_warn and max_abs > limits.abs_warn)
            or cosine < limits.cosine_fail
            or max_abs > limits.abs_fail
        )
    row.passed = not (failed or wrong_specials or other_dtype)
    return row


def _shift(x: torch.Tensor, y: torch.Tensor, scale: torch.Tensor, rtol: float) -> float:
    """The mean of y's relative error towards larger magnitudes, where it is a systematic
    change rather than rounding: larger than an eighth of the dtype's tolerance and beyond
    SHIFT_SIGMAS standard errors of chance. Rounding to nearest errs both ways; an RMSNorm eps
    10000 times too large shrinks every bfloat16 output by 0.5%, each element within tolerance."""
    if x.numel() < 2:
        return 0.0
    signed = (y - x) * x.sign() / (x.abs() + scale).clamp_min(torch.finfo(torch.float64).tiny)
    mean, error = float(signed.mean()), float(signed.std()) / math.sqrt(signed.numel())
    return mean if abs(mean) > rtol / 8 and abs(mean) > SHIFT_SIGMAS * error else 0.0


@dataclass
class Comparison:
    rows: list[Row]
    only_original: list[str]
    only_migrated: list[str]
    first_divergence: str | None
    output_rows: list[Row]
    # each module's own code on the original's inputs (replay.py): its outputs (`module` is the
    # module) and what it hands the modules it calls (`note` says so)
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

    def forward_rows(self) -> list[Row]:
        """The module outputs and the model's outputs, each tensor once: the model's outputs
        are also the top module's, where the model is called once."""
        top = {row.key.removeprefix("(model)") for row in self.rows if row.module == "(model)"}
        return self.rows + [row for row in self.output_rows if row.key.removeprefix("output") not in top]


def compare_runs(original: SideReport, migrated: SideReport, limits: Thresholds) -> Comparison:
    same = limits.rule == "tight" or (limits.rule == "auto" and original.backing == migrated.backing)
    coarsest = _coarsest(original, limits)
    limits, computed_in = _computed_in(limits, original)
    theirs = {key: (module, tensor) for key, module, tensor in migrated.rows}
    ours = {key for key, _, _ in original.rows}
    rows = [
        compare_tensors(key, module, tensor, theirs[key][1], limits, same)
        for key, module, tensor in original.rows
        if key in theirs
    ]
    output_rows = [
        compare_tensors(f"output{path}", "(output)", a, b, limits, same)
        for (path, a), (_, b) in zip(original.output, migrated.output, strict=False)
    ]
    own_rows = _own_rows(original, migrated, limits, same)
    first, between = _origin(own_rows)
    drift = []
    if first is None:
        drift = _drift(rows + output_rows, own_rows, coarsest)
        excused = {row.key for row in drift}
        rest = [row for row in rows if row.key not in excused]
        first, between = _grown(rest, own_rows) or _blame(
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
    comparison.loss_rtol = limits.loss_rtol
    comparison.rule = (
        f"tight ({original.backing} vs {migrated.backing}): at least {limits.within_share:.1%} of "
        "each tensor's elements within the dtype's tolerance"
        + (f" (at least {computed_in}'s, which the forward computes in)" if computed_in else "")
        + ", dtypes equal"
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
    training = replace(limits, dtype_rtol={d: BACKWARD_FACTOR * r for d, r in limits.dtype_rtol.items()})
    comparison.steps = _compare_steps(original, migrated, training, same)
    noise = max((step["noise_elements"] for step in comparison.steps), default=0)
    if noise:
        comparison.warnings.append(
            f"{noise} parameter element(s) had gradients within rounding of zero (a key bias before "
            "softmax has none in exact arithmetic): Adam-like optimizers turn that noise into full "
            "steps, so their values after a step are not compared (their gradients are)"
        )
    comparison.memory = _memory(original, migrated)
    problems = list(migrated.state_mismatch)
    if first is not None:
        problems.append(f"module outputs diverge first at {first}" + (f" ({between})" if between else ""))
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
        first = (
            (bad["failed_grads"] and f"gradient of {bad['failed_grads'][0]}")
            or (bad["failed_state"] and bad["failed_state"][0])
            or (bad["failed_updates"] and f"the step's update to {bad['failed_updates'][0]}")
        )
        problems.append(f"training diverges at step {bad['step']}" + (f", first at {first}" if first else ""))
    if original.steps and migrated.steps:
        problems += _dropout_asked(original.dropout, migrated.dropout)
    ratio = comparison.memory.get("peak_ratio")
    if limits.max_memory_ratio is not None and ratio is not None and ratio > limits.max_memory_ratio:
        problems.append(f"peak memory ratio {ratio:.2f} exceeds {limits.max_memory_ratio}")
    comparison.problems = problems
    comparison.passed = not problems
    return comparison


def _own_rows(original: SideReport, migrated: SideReport, limits: Thresholds, same: bool) -> list[Row]:
    """The migrated modules' own code against the original's, call by call in the order calls
    finish: what each returned given the original's inputs and its callees' original outputs,
    and what it handed its callees."""
    outputs = {key: tensor for key, _, tensor in original.rows}
    inputs = {key: tensor for key, _, tensor in original.inputs}
    rows = []
    for module, handed, key, tensor in migrated.replayed:
        theirs = (inputs if handed else outputs).get(key)
        if theirs is not None:
            row = compare_tensors(key, module, theirs, tensor, limits, same, shift_check=True)
            row.handed = handed
            rows.append(row)
    return rows


def _origin(own_rows: list[Row]) -> tuple[str | None, str]:
    """The first module whose own code differs, and how: it returns something else given the
    same inputs and callees' outputs, or it hands a callee a different input."""
    failing = next((row for row in own_rows if not row.passed), None)
    if failing is None:
        return None, ""
    if failing.handed:
        return failing.module, f"in its own code: {failing.key.split('[', 1)[0]} is handed a different input"
    return failing.module, ""


def _grown(rows: list[Row], own_rows: list[Row]) -> tuple[str, str] | None:
    """Where a difference fails end to end though every module's own code agrees within
    tolerance: the module whose own code differs most (by cosine distance, scale-free) made it,
    and later modules grew it past the tolerance. None where nothing fails or nothing was
    replayed, or where every module's own code is exact."""
    failing = next((row for row in rows if not row.passed), None)
    if failing is None or failing.key not in {row.key for row in own_rows if not row.handed}:
        return None  # nothing fails, or the failing module's own code was not judged
    origin = max(own_rows, key=lambda row: 1 - row.cosine)
    if origin.cosine >= 1.0:
        return None
    return origin.module, (
        f"its own code differs most, within tolerance ({origin.key}: cosine {origin.cosine:.9f}), and the "
        f"difference grows past the tolerance by {failing.key}"
    )


def _drift(rows: list[Row], own_rows: list[Row], coarsest: str) -> list[Row]:
    """The failing end-to-end rows that rounding accumulated over the network explains: where
    the forward computes in a dtype whose rounding adds up past its own tolerance (bfloat16,
    float16) and the module's own code, replayed, agrees."""
    if coarsest not in COARSE:
        return []
    returned = [row for row in own_rows if not row.handed]  # none fails: else that is the origin
    fine = {row.key for row in returned} | {
        "output" + row.key.removeprefix("(model)") for row in returned if row.module == "(model)"
    }
    return [row for row in rows if not row.passed and row.key in fine and not row.dtype_migrated]


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


def _blame(
    rows: list[Row],
    inputs_a: list[tuple[str, str, torch.Tensor]],
    inputs_b: list[tuple[str, str, torch.Tensor]],
    limits: Thresholds,
    same: bool,
) -> tuple[str | None, str]:
    """The module whose own code makes the first difference, and where in it when that is
    between its children. Hooks report a module when it returns, children first, so the first
    differing output may belong to a module that was merely handed a different input: then the
    difference arose in the code of an enclosing module, between its children, and the blame
    goes up to the innermost enclosing module that was called and whose inputs agree. Inputs are
    compared as the outputs are: an additive -inf mask by the positions of its infinities, a
    complex rotary table as complex numbers."""
    failing = next((r for r in rows if not r.passed), None)
    if failing is None:
        return None, ""
    theirs = {key: tensor for key, _, tensor in inputs_b}
    agree: dict[str, bool] = {}
    for key, module, tensor in inputs_a:
        if key in theirs:
            ok = compare_tensors(key, module, tensor, theirs[key], limits, same).passed
            agree[module] = agree.get(module, True) and ok
    module = failing.module
    if agree.get(module, True):
        return module, ""
    child = module
    while "." in module:
        module = module.rsplit(".", 1)[0]
        if agree.get(module, False):  # a container never called (a ModuleList) runs no code of its own
            return module, f"in its own code: {child} is handed a different input"
    top = "(model)"
    return (
        (top, f"in its own code: {child} is handed a different input")
        if agree.get(top, True)
        else (child, "")
    )


def _dropout_asked(original: dict[str, list[float]], migrated: dict[str, list[float]]) -> list[str]:
    """Where the two sides ask for different dropout probabilities in training, call site by call
    site: steps run with dropout off, so a probability ported wrong (npu_fusion_attention's
    `keep_prob=p` where it keeps 1 - p) changes no compared number."""

    def asked(values: list[float] | None) -> str:
        return "p=" + ", ".join(f"{p:g}" for p in values) if values else "no dropout"

    return [
        f"dropout asked for differs at {site}: the original {asked(original.get(site))}, the migrated "
        f"{asked(migrated.get(site))} (npu_fusion_attention's keep_prob is the share kept, 1 - p)"
        for site in sorted(set(original) | set(migrated))
        if original.get(site) != migrated.get(site)
    ]


def _coarsest(original: SideReport, limits: Thresholds) -> str:
    """The least precise floating-point dtype among the forward's module outputs."""
    computed = {_dtype_name(t) for _, _, t in original.rows if t.is_floating_point()}
    return max(computed, key=lambda d: limits.dtype_rtol.get(d, 0.0), default="")


def _computed_in(limits: Thresholds, original: SideReport) -> tuple[Thresholds, str]:
    """Tolerances no finer than that of the least precise dtype among the forward's module
    outputs, and that dtype where it coarsens any: under autocast a float32 tensor made from
    bfloat16 matmuls is only as exact as bfloat16."""
    computed = {_dtype_name(t) for _, _, t in original.rows if t.is_floating_point()}
    coarsest = _coarsest(original, limits)
    floor = limits.dtype_rtol.get(coarsest, 0.0)
    if not any(rtol < floor for d, rtol in limits.dtype_rtol.items() if d in computed):
        return limits, ""
    return replace(limits, dtype_rtol={d: max(r, floor) for d, r in limits.dtype_rtol.items()}), coarsest


def _compare_steps(
    original: SideReport, migrated: SideReport, limits: Thresholds, same: bool
) -> list[dict[str, Any]]:
    noise: dict[str, torch.Tensor] = {}  # by parameter: elements whose gradient was rounding noise
    steps = []
    before: tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]] = (original.start, migrated.start)
    for number, (a, b) in enumerate(zip(original.steps, migrated.steps, strict=False), start=1):
        floor = _model_scale(a.grads.values())
        grad_rows = [
            compare_tensors(name, name, grad, b.grads[name], limits, same, floor)
            for name, grad in a.grads.items()
            if name in b.grads
        ]
        for name, grad in a.grads.items():
            if name in b.grads and same:
                _add_noise(noise, name, grad, b.grads[name], limits, floor)
        loss_ok = math.isclose(a.loss, b.loss, rel_tol=limits.loss_rtol, abs_tol=limits.loss_rtol)
        worst = min(grad_rows, key=lambda r: r.cosine, default=None)
        theirs = b.state
        state_rows = []
        for name, tensor in a.state.items():
            if name in theirs:
                ours, other = _without(noise.get(_parameter_of(name)), tensor, theirs[name])
                state_rows.append(compare_tensors(name, name, ours, other, limits, same))
        diverged = [r.key for r in state_rows if not r.passed]
        update_rows = _compare_updates(before, (a.state, b.state), noise, limits, same)
        before = (a.state, b.state)
        steps.append(
            {
                "step": number,
                "loss_original": a.loss,
                "loss_migrated": b.loss,
                "grad_norm_original": a.grad_norm,
                "grad_norm_migrated": b.grad_norm,
                "worst_grad": asdict(worst) if worst else None,
                "failed_grads": [r.key for r in grad_rows if not r.passed],
                "failed_state": diverged,  # parameters, buffers, optimizer state: the first named first
                "failed_updates": [r.key for r in update_rows if not r.passed],
                "state_compared": len(state_rows),
                "noise_elements": int(sum(int(mask.sum()) for mask in noise.values())),
                "ms_original": a.ms,
                "ms_migrated": b.ms,
                "passed": loss_ok and all(r.passed for r in grad_rows + update_rows) and not diverged,
            }
        )
    return steps


def _compare_updates(
    before: tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]],
    after: tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]],
    noise: dict[str, torch.Tensor],
    limits: Thresholds,
    same: bool,
) -> list[Row]:
    """What the step changed in each parameter and buffer (after - before, each side from its own
    before), compared against the size of the change rather than of the parameter: weight decay
    on a norm's weight on one side only moves it by lr * wd (1e-5 of a weight of 1.0), far below
    the parameter's tolerance but 1% of an Adam step. A change is judged against the larger of
    its own rms, the model's parameters' (rounding in a gradient of noise size makes a change of
    noise size)
    and the rounding of storing the parameter (a unit in the last place of its largest value)."""
    ours, theirs = _updates(before[0], after[0]), _updates(before[1], after[1])
    parameters = {name for name in ours if name.startswith("parameter ")}
    model_scale = _model_scale(ours[name] for name in parameters)  # buffers (running statistics) apart
    rows = []
    for name, change in ours.items():
        if name not in theirs:
            continue
        rtol = limits.dtype_rtol.get(_dtype_name(change), DTYPE_RTOL["float32"])
        stored = float(before[0][name].abs().max()) * torch.finfo(change.dtype).eps if change.numel() else 0.0
        floor = max(model_scale if name in parameters else 0.0, STORED_ULPS * stored / rtol)
        a, b = _without(noise.get(_parameter_of(name)), change, theirs[name])
        rows.append(compare_tensors(name, name, a, b, limits, same, floor))
    return rows


def _updates(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """after - before for each floating-point parameter and buffer, in its own dtype (exact where
    the change is small beside the value, as a step's is)."""
    return {
        name: after[name] - tensor
        for name, tensor in before.items()
        if not name.startswith("optimizer ")
        and tensor.is_floating_point()
        and name in after
        and after[name].shape == tensor.shape
        and after[name].dtype == tensor.dtype
    }


def _model_scale(grads: Iterable[torch.Tensor]) -> float:
    """The rms of all of a step's floating-point gradient elements: the scale rounding noise in
    any one gradient is measured against (a tensor's own rms is noise too when the tensor is)."""
    total, count = 0.0, 0
    for grad in grads:
        if grad.is_floating_point():
            total += float(grad.detach().double().pow(2).sum())
            count += grad.numel()
    return math.sqrt(total / count) if count else 0.0


def _add_noise(
    noise: dict[str, torch.Tensor],
    name: str,
    a: torch.Tensor,
    b: torch.Tensor,
    limits: Thresholds,
    floor: float,
) -> None:
    """Mark the elements of a gradient that lie within the comparison's rounding band around zero
    (relative to the tensor's rms or the model's gradient scale, the larger) and differ between
    the sides by more than their own size allows: their sign and size are noise, and Adam-like
    optimizers normalise noise into full steps, so the sides' parameters legitimately part there
    from this step on."""
    if a.shape != b.shape or not a.is_floating_point() or not b.is_floating_point():
        return
    x, y = a.detach().double(), b.detach().double()
    rtol = limits.dtype_rtol.get(_dtype_name(a), DTYPE_RTOL["float32"])
    band = rtol * max(float(x.pow(2).mean().sqrt()), floor)
    marked = (x.abs() <= band) & ((x - y).abs() > rtol * x.abs())
    noise[name] = noise[name] | marked if name in noise else marked


def _parameter_of(state_name: str) -> str:
    """`parameter w` and `optimizer w.exp_avg` belong to parameter w."""
    kind, _, rest = state_name.partition(" ")
    return rest if kind == "parameter" else rest.rsplit(".", 1)[0] if kind == "optimizer" else ""


def _without(
    mask: torch.Tensor | None, a: torch.Tensor, b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """a and b without the masked elements (where the mask fits them)."""
    if mask is None or not mask.any() or a.shape != mask.shape or b.shape != mask.shape:
        return a, b
    return a[~mask], b[~mask]


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
