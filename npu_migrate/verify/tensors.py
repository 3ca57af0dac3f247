"""One tensor against another: msprobe's metrics and the verdict of the rule that fits the
comparison (tight where both sides compute on the same backing, msprobe's thresholds across
hardware), with infinities compared by position and complex tensors as complex."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

# What reordering the same operations explains, by dtype: a few units in the last place of the
# dtype, relative to each element plus the tensor's root-mean-square (so that elements near zero,
# where a relative error means nothing, are judged against the tensor's scale).
DTYPE_RTOL = {
    "float64": 1e-10, "float32": 1e-4, "float16": 2**-8, "bfloat16": 2**-6,
    "complex128": 1e-10, "complex64": 1e-4,  # complex: the precision of their parts
}  # fmt: skip
# A mean shift this many standard errors from zero is not chance (own-code rows, _shift)
SHIFT_SIGMAS = 6


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
    computed_in: str = ""  # the coarser dtype its computation ran in, whose rounding it was judged by


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


def dtype_name(tensor: torch.Tensor) -> str:
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
    computed_in: str | None = None,
) -> Row:
    """Metrics of the migrated tensor `b` against the original `a`, and the verdict of the rule
    that fits the comparison (Thresholds). Errors are relative to |a| plus a's rms, or plus
    `scale_floor` where that is larger: the scale of the tensors a gradient is computed among,
    so a gradient that is rounding noise (zero in exact arithmetic) is judged as noise. With
    `shift_check`, a systematic shift of the values (see `_shift`) fails too. `computed_in`: a
    coarser dtype the computation ran in (a float32 row made through a bfloat16 operator), whose
    rounding the row is then judged by."""
    dtype = dtype_name(a)
    if a.shape != b.shape:
        return Row(key, module, dtype, list(a.shape), 0.0, math.inf, math.inf, math.inf, 0, 0, 0, False,
                   f"shape {tuple(a.shape)} vs {tuple(b.shape)}")  # fmt: skip
    x, y = _flat(a), _flat(b)
    other_dtype = dtype_name(b) if b.dtype != a.dtype else ""
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
    coarser = limits.dtype_rtol.get(computed_in or "", 0.0)
    rtol, computed_in = (coarser, computed_in) if coarser > rtol else (rtol, "")
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
        computed_in=computed_in or "",
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
