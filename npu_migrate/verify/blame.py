"""Which module's code makes a difference: each module's own code replayed on the original's
inputs (replay.py) first, then what the end-to-end rows and the modules' inputs say."""

from __future__ import annotations

import math

import torch

from npu_migrate.verify.protocol import SideReport
from npu_migrate.verify.tensors import Row, Thresholds, compare_tensors

# Dtypes whose rounding, op after op, adds up past their own tolerance over a network's depth
COARSE = ("bfloat16", "float16")


def judge_own_code(original: SideReport, migrated: SideReport, limits: Thresholds, same: bool) -> list[Row]:
    """The migrated modules' own code against the original's, call by call in the order calls
    finish: what each returned given the original's inputs and its callees' original outputs,
    and what it handed its callees; a callee it calls more often than the original's code did
    (a norm applied where another was) fails as such."""
    outputs = {key: tensor for key, _, tensor in original.rows}
    inputs = {key: tensor for key, _, tensor in original.inputs}
    called = {key.split("[", 1)[0] for key in inputs}  # the original's calls, `name` or `name#N`
    named = {module for _, module, _ in original.inputs}
    rows: list[Row] = []
    extra: set[tuple[str, str]] = set()  # (module, callee) already said to call it more often
    for module, handed, key, tensor in migrated.replayed:
        call = key.split("[", 1)[0]
        callee = call.split("#", 1)[0]
        if handed and call not in called and callee in named:  # norm1 applied twice, where once
            if (module, callee) not in extra:
                extra.add((module, callee))
                rows.append(_extra_call(module, callee))
            continue
        ours = (inputs if handed else outputs).get(key)
        if ours is not None:
            within = original.computed_within.get(key)
            row = compare_tensors(
                key, module, ours, tensor, limits, same, shift_check=True, computed_in=within
            )
            row.handed = handed
            rows.append(row)
    return rows


MORE_CALLS = "[more calls]"  # an own-code row's key suffix: the callee is called more often


def _extra_call(module: str, callee: str) -> Row:
    """A failing own-code row: the module's code calls `callee` more often than the original's."""
    return Row(
        key=f"{callee}{MORE_CALLS}", module=module, dtype="-", shape=[], cosine=0.0, max_abs=math.inf,
        max_rel=math.inf, rmse=math.inf, within_1e3=0.0, within_5e3=0.0, within_dtype_tol=0.0,
        passed=False, note=f"{module} calls {callee} more often than the original does", handed=True,
    )  # fmt: skip


def origin(own_rows: list[Row]) -> tuple[str | None, str]:
    """The first module whose own code differs, and how: it returns something else given the
    same inputs and callees' outputs, or it hands a callee a different input."""
    failing = next((row for row in own_rows if not row.passed), None)
    if failing is None:
        return None, ""
    if failing.key.endswith(MORE_CALLS):
        return failing.module, f"in its own code: {failing.note}"
    if failing.handed:
        return failing.module, f"in its own code: {failing.key.split('[', 1)[0]} is handed a different input"
    return failing.module, ""


def grown(rows: list[Row], own_rows: list[Row]) -> tuple[str, str] | None:
    """Where a difference fails end to end though every module's own code agrees within
    tolerance: the module whose own code differs most (by cosine distance, scale-free) made it,
    and later modules grew it past the tolerance. None where nothing fails or nothing was
    replayed, or where every module's own code is exact."""
    failing = next((row for row in rows if not row.passed), None)
    if failing is None or failing.key not in {row.key for row in own_rows if not row.handed}:
        return None  # nothing fails, or the failing module's own code was not judged
    # a difference within the cosine's own rounding (1e-16) is no module's doing
    telling = [row for row in own_rows if 1 - row.cosine > _cosine_floor(row.dtype)]
    if not telling:
        return None
    origin = max(telling, key=lambda row: 1 - row.cosine)
    return origin.module, (
        f"its own code differs most, within tolerance ({origin.key}: cosine {origin.cosine:.9f}), and the "
        f"difference grows past the tolerance by {failing.key}"
    )


def _cosine_floor(dtype: str) -> float:
    """How far below 1 rounding alone takes the cosine of two equal tensors of `dtype`: eps^2."""
    kind = getattr(torch, dtype, None)
    return (
        float(torch.finfo(kind).eps) ** 2 if isinstance(kind, torch.dtype) and kind.is_floating_point else 0.0
    )


def drifted(rows: list[Row], own_rows: list[Row], coarsest: str) -> list[Row]:
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


def blame_by_inputs(
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
        if module in agree:  # called and handed a different input too: the difference is above it
            child = module
    top = "(model)"
    return (
        (top, f"in its own code: {child} is handed a different input")
        if agree.get(top, True)
        else (child, "")
    )
