"""Training steps compared: the loss, each gradient (rounding noise judged against the model's
gradient scale), the state a step leaves, what it changed in each parameter and buffer, and the
dropout probabilities each call site asked for."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

import torch

from npu_migrate.verify.protocol import SideReport, Step
from npu_migrate.verify.tensors import DTYPE_RTOL, Row, Thresholds, compare_tensors, dtype_name

# A step's gradients chain the forward's operations and their transposes: held to this many times
# the tolerance of the least precise dtype the forward computed in.
BACKWARD_FACTOR = 4
# Storing a parameter rounds it to its dtype: a step's change read as after - before on the two
# sides may differ by one unit in the last place of the values, up to 2 * eps * |value|.
STORED_ULPS = 2


def compare_steps(
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
        one_sided = _one_sided(a, b)
        for row in grad_rows:  # a gradient that differs is not noise: its elements are compared
            if row.passed and same:
                _add_noise(noise, row.key, a.grads[row.key], b.grads[row.key], limits, floor)
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
                "failed_grad_rows": [asdict(r) for r in grad_rows if not r.passed],
                "one_sided_grads": one_sided,
                "failed_state": diverged,  # parameters, buffers, optimizer state: the first named first
                "failed_updates": [r.key for r in update_rows if not r.passed],
                "state_compared": len(state_rows),
                "noise_elements": int(sum(int(mask.sum()) for mask in noise.values())),
                "ms_original": a.ms,
                "ms_migrated": b.ms,
                "passed": loss_ok
                and all(r.passed for r in grad_rows + update_rows)
                and not diverged
                and not one_sided,
            }
        )
    return steps


def _one_sided(a: Step, b: Step) -> list[str]:
    """Parameters both models have whose gradient only one side computed (a tensor detached, or
    a parameter left out of the graph, on one side): `name (only the original's)`."""
    theirs = {name for name in b.state if name.startswith("parameter ")}
    ours = {name for name in a.state if name.startswith("parameter ")}
    only_a = [
        f"{n} (only the original's)" for n in a.grads if n not in b.grads and f"parameter {n}" in theirs
    ]
    only_b = [f"{n} (only the migrated's)" for n in b.grads if n not in a.grads and f"parameter {n}" in ours]
    return only_a + only_b


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
        rtol = limits.dtype_rtol.get(dtype_name(change), DTYPE_RTOL["float32"])
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
    """Mark the elements of a gradient that are rounding noise (noise_mask): their sign and size
    are noise, and Adam-like optimizers normalise noise into full steps, so the sides'
    parameters legitimately part there from this step on."""
    if a.shape != b.shape or not a.is_floating_point() or not b.is_floating_point():
        return
    marked = noise_mask(a, b, limits, floor)
    noise[name] = noise[name] | marked if name in noise else marked


def noise_mask(a: torch.Tensor, b: torch.Tensor, limits: Thresholds, floor: float) -> torch.Tensor:
    """The elements of the original's gradient `a` that lie within the comparison's rounding band
    around zero (relative to the tensor's rms or the model's gradient scale, the larger) and
    that the migrated `b` differs from by more than their own size allows."""
    x, y = a.detach().double(), b.detach().double()
    rtol = limits.dtype_rtol.get(dtype_name(a), DTYPE_RTOL["float32"])
    band = rtol * max(float(x.pow(2).mean().sqrt()), floor)
    return (x.abs() <= band) & ((x - y).abs() > rtol * x.abs())


def resync_noise(
    model: torch.nn.Module, optimizer: Any, original: Step, grads: dict[str, torch.Tensor], limits: Thresholds
) -> int:
    """On the migrated side, after a step: the parameter elements whose gradient was rounding
    noise (in a gradient that otherwise agrees, as compare_steps marks them) take the original's
    values after the step, with their optimizer state, so that the full steps Adam makes of
    noise on each side do not carry into the next step's gradients (their values are not
    compared; what follows from them would be). Parameters the sides name or shape differently
    are left as they are. The count of elements given."""
    floor = _model_scale(original.grads.values())
    given = 0
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            a, b = original.grads.get(name), grads.get(name)
            after = original.state.get(f"parameter {name}")
            if a is None or b is None or after is None:
                continue
            if a.shape != b.shape or after.shape != parameter.shape:
                continue
            if not a.is_floating_point() or not compare_tensors(name, name, a, b, limits, True, floor).passed:
                continue
            mask = noise_mask(a, b, limits, floor).to(parameter.device)
            if not mask.any():
                continue
            parameter[mask] = after.to(parameter.device, parameter.dtype)[mask]
            for key, value in optimizer.state.get(parameter, {}).items():
                theirs = original.state.get(f"optimizer {name}.{key}")
                if isinstance(value, torch.Tensor) and theirs is not None and value.shape == mask.shape:
                    value[mask] = theirs.to(value.device, value.dtype)[mask]
            given += int(mask.sum())
    return given


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


def dropout_asked(original: dict[str, list[float]], migrated: dict[str, list[float]]) -> list[str]:
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
