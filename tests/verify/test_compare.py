"""The verdict rules, unit by unit: what a tensor is held to, and what a training step's state is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from npu_migrate.verify.compare import compare_runs  # noqa: E402
from npu_migrate.verify.protocol import SideReport, Step  # noqa: E402
from npu_migrate.verify.report import step_failures  # noqa: E402
from npu_migrate.verify.tensors import Thresholds, compare_tensors  # noqa: E402


def side(rows: list[tuple[str, torch.Tensor]], steps: list[Step] | None = None) -> SideReport:
    report = SideReport(device="cpu", emulated=False, backing="cpu")
    report.rows = [(key, key, tensor) for key, tensor in rows]
    report.output = [("", rows[-1][1])]
    report.steps = steps or []
    return report


def test_a_scalar_is_not_constant_but_a_tensor_of_zeros_is() -> None:
    loss = torch.tensor(2.5)
    assert not compare_tensors("loss", "m", loss, loss, Thresholds(), True).uninformative
    zeros = torch.zeros(3)
    assert compare_tensors("head", "m", zeros, zeros, Thresholds(), True).uninformative


def test_a_forward_that_computes_in_bfloat16_holds_its_float32_tensors_to_bfloat16() -> None:
    torch.manual_seed(0)
    hidden = torch.randn(64, dtype=torch.bfloat16)
    residual = torch.randn(64)
    off = residual * (1 + 2**-9)  # a bfloat16 rounding's worth: far beyond float32's 1e-4
    fp32_only = compare_runs(side([("a", residual)]), side([("a", off)]), Thresholds(rule="tight"))
    assert not fp32_only.passed
    mixed = compare_runs(
        side([("h", hidden), ("a", residual)]), side([("h", hidden), ("a", off)]), Thresholds(rule="tight")
    )
    assert mixed.passed and "at least bfloat16's" in mixed.rule


def test_state_where_the_gradient_was_rounding_noise_is_left_out_and_said() -> None:
    """A key bias: zero gradient in exact arithmetic, noise of either sign in practice; AdamW
    moves it a full step either way. Where the gradient is real the state is still compared."""
    grad_a = torch.tensor([1.0, -2.0, 1.5, 1e-11, -3e-12])
    grad_b = torch.tensor([1.0, -2.0, 1.5, -2e-11, 4e-12])
    after_a = torch.tensor([0.999, 0.001, 0.999, 0.999, 0.001])
    after_b = torch.tensor([0.999, 0.001, 0.999, 0.001, 0.999])
    steps_a = [Step(1.0, 1.0, {"bias": grad_a}, {"parameter bias": after_a}, 1.0)]
    steps_b = [Step(1.0, 1.0, {"bias": grad_b}, {"parameter bias": after_b}, 1.0)]
    rows = [("x", torch.randn(8))]
    result = compare_runs(side(rows, steps_a), side(rows, steps_b), Thresholds(rule="tight"))
    assert result.passed and result.steps[0]["noise_elements"] == 2
    assert any("2 parameter element(s) had gradients within rounding of zero" in w for w in result.warnings)
    wrong = after_b.clone()
    wrong[0] = 0.5  # where the gradient was real, a different value still fails
    steps_b[0].state["parameter bias"] = wrong
    result = compare_runs(side(rows, steps_a), side(rows, steps_b), Thresholds(rule="tight"))
    assert not result.passed and result.steps[0]["failed_state"] == ["parameter bias"]


def test_a_gradient_that_is_rounding_noise_is_judged_against_the_models_gradient_scale() -> None:
    """timm's CaiT: a bias before softmax (proj_l) has no gradient in exact arithmetic; its noise,
    1e-21 beside gradients of 1e-2, differs in sign between the sides and is left out, whole
    (its own rms is noise too). A gradient off by 1% at the model's scale still fails."""
    torch.manual_seed(0)
    weight = torch.randn(256) * 1e-2
    noise_a, noise_b = torch.tensor([2.8e-21, -1.1e-21]), torch.tensor([-0.9e-21, 1.3e-21])
    after_a, after_b = torch.tensor([-2.8e-18, 1.1e-18]), torch.tensor([0.9e-18, -1.3e-18])

    def steps(noise: torch.Tensor, after: torch.Tensor, scale: float = 1.0) -> list[Step]:
        grads = {"proj_l.bias": noise, "w": weight * scale}
        return [Step(1.0, 1.0, grads, {"parameter proj_l.bias": after, "parameter w": weight}, 1.0)]

    rows = [("x", torch.randn(8))]
    original = side(rows, steps(noise_a, after_a))
    result = compare_runs(original, side(rows, steps(noise_b, after_b)), Thresholds(rule="tight"))
    assert result.passed and result.steps[0]["noise_elements"] == 2
    off = compare_runs(original, side(rows, steps(noise_b, after_b, 1.01)), Thresholds(rule="tight"))
    assert not off.passed and off.steps[0]["failed_grads"] == ["w"]
    [words] = step_failures(off.steps[0])  # the failing gradient's figures, not its name alone
    figures = r"\(cosine 1\.000000, \d+\.\d% of its elements within tolerance\)"
    assert re.fullmatch(r"gradient of w " + figures, words)


def test_a_gradient_only_one_side_computes_fails_the_step() -> None:
    """A DiT's modulation detached on the migrated side (its parameter kept, no gradient): a
    gradient present on one side only is a failure, not a row left out."""
    weight, shift = torch.randn(16), torch.randn(4)
    state = {"parameter w": weight, "parameter shift": shift}

    def steps(grads: dict[str, torch.Tensor]) -> list[Step]:
        return [Step(1.0, 1.0, grads, state, 1.0)]

    rows = [("x", torch.randn(8))]
    both = {"w": weight * 0.1, "shift": shift * 0.1}
    original = side(rows, steps(both))
    result = compare_runs(original, side(rows, steps({"w": weight * 0.1})), Thresholds(rule="tight"))
    assert not result.passed and result.steps[0]["one_sided_grads"] == ["shift (only the original's)"]
    assert "training diverges at step 1, first at gradient of shift (only the original's)" in result.problems
    assert compare_runs(original, side(rows, steps(both)), Thresholds(rule="tight")).passed


def test_fused_operator_calls_are_counted_where_migrated_code_looks_them_up(tmp_path: Path) -> None:
    import types

    from npu_migrate.verify.capture import FusedCalls

    module = types.SimpleNamespace(npu_rms_norm=lambda x: (x, x), fast_gelu=lambda x: x, npu=object())
    original = module.npu_rms_norm
    with FusedCalls(module, tmp_path) as calls:
        for _ in range(3):
            module.npu_rms_norm(1)
        module.fast_gelu(2)
    assert calls.counts == {"npu_rms_norm": 3, "fast_gelu": 1}
    assert module.npu_rms_norm is original


def test_infinities_are_compared_by_position() -> None:
    """Meta's Llama adds a float mask of -inf above the diagonal: the same mask on both sides
    agrees, one whose diagonal is off by one does not (as plain numbers the infinities overflow
    the rms and every relative error reads 0)."""
    mask = torch.triu(torch.full((8, 8), float("-inf")), diagonal=1)
    off_by_one = torch.triu(torch.full((8, 8), float("-inf")), diagonal=2)
    assert compare_tensors("mask", "m", mask, mask.clone(), Thresholds(), True).passed
    row = compare_tensors("mask", "m", mask, off_by_one, Thresholds(), True)
    assert not row.passed and "NaN/Inf at 7 position(s)" in row.note
    assert row.within_dtype_tol == 1 - 7 / 64
    assert not compare_tensors("mask", "m", mask, off_by_one, Thresholds(), False).passed  # msprobe's rule
    nan_one_side = torch.ones(4)
    nan_one_side[2] = float("nan")
    assert not compare_tensors("x", "m", torch.ones(4), nan_one_side, Thresholds(), True).passed
    assert compare_tensors("x", "m", nan_one_side, nan_one_side.clone(), Thresholds(), True).passed


def test_complex_tensors_are_compared_as_complex_numbers() -> None:
    """A rotary table from torch.polar, conjugated on one side, has the same real part."""
    angles = torch.outer(torch.arange(8.0), torch.linspace(0.1, 1.0, 4))
    table = torch.polar(torch.ones_like(angles), angles)
    assert compare_tensors("freqs_cis", "m", table, table.clone(), Thresholds(), True).passed
    row = compare_tensors("freqs_cis", "m", table, table.conj(), Thresholds(), True)
    assert not row.passed and row.dtype == "complex64"
    assert not compare_tensors("freqs_cis", "m", table, table.conj(), Thresholds(), False).passed


def test_noise_elements_take_the_originals_values_after_a_step() -> None:
    """Adam makes a full step of a gradient that is rounding noise, in a direction each side draws
    by chance: on the migrated side such elements take the original's value and moments after the
    step, in a gradient that otherwise agrees; a gradient that differs keeps its own."""
    from npu_migrate.verify.training import resync_noise

    model = torch.nn.Linear(4, 1, bias=False)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    grad = torch.tensor([[1.0, -2.0, 1e-9, 3.0]])
    model.weight.grad = grad.clone()
    optimizer.step()
    after = {"parameter weight": torch.tensor([[5.0, 6.0, 7.0, 8.0]])}
    after |= {f"optimizer weight.{k}": torch.full((1, 4), 9.0) for k in ("exp_avg", "exp_avg_sq")}
    original = Step(1.0, 1.0, {"weight": grad}, after, 1.0)
    ours = grad.clone()
    ours[0, 2] = -1e-9  # the noise element, drawn the other way
    before = model.weight.detach().clone()
    assert resync_noise(model, optimizer, original, {"weight": ours}, Thresholds()) == 1
    assert model.weight[0, 2] == 7.0 and optimizer.state[model.weight]["exp_avg"][0, 2] == 9.0
    assert torch.equal(model.weight[0, [0, 1, 3]], before[0, [0, 1, 3]]), "agreeing elements keep theirs"
    differing = ours * torch.tensor([[1.0, 1.5, 1.0, 1.0]])  # the gradient differs: not noise
    assert resync_noise(model, optimizer, original, {"weight": differing}, Thresholds()) == 0
