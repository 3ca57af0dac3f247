"""Each module's own code judged alone (replay.py), unit by unit: a module is called again on the
original's inputs, its callees return the original's outputs, and what it returns and hands on is
recorded; containers keep their kind; a call that cannot be made again is left out."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, namedtuple

import pytest

torch = pytest.importorskip("torch")

from npu_migrate.verify.capture import ModuleRecorder  # noqa: E402
from npu_migrate.verify.compare import compare_runs  # noqa: E402
from npu_migrate.verify.protocol import SideReport  # noqa: E402
from npu_migrate.verify.replay import rebuild, replay  # noqa: E402
from npu_migrate.verify.tensors import Thresholds  # noqa: E402

Pair = namedtuple("Pair", "first second")


@dataclasses.dataclass
class Output:
    hidden: torch.Tensor
    extra: int = 0


def test_rebuild_swaps_tensors_by_path_and_keeps_each_container_kind() -> None:
    value = (Pair(torch.zeros(1), 3), OrderedDict(a=torch.ones(2)), [Output(torch.ones(1), 7)])
    seen = []

    def swap(path: str, tensor: torch.Tensor) -> torch.Tensor:
        seen.append(path)
        return tensor + 10

    rebuilt = rebuild(value, swap)
    assert seen == ["[0][0]", "[1].a", "[2][0].hidden"]  # as capture.flatten names them
    assert isinstance(rebuilt[0], Pair) and rebuilt[0].second == 3 and float(rebuilt[0].first) == 10
    assert isinstance(rebuilt[1], OrderedDict) and rebuilt[1]["a"].tolist() == [11, 11]
    assert isinstance(rebuilt[2][0], Output) and rebuilt[2][0].extra == 7
    assert float(value[0].first) == 0, "the original left alone"


class Scale(torch.nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


class Block(torch.nn.Module):
    """Calls a linear layer, then hands its output, scaled in its own code, to a second one."""

    def __init__(self, between: float) -> None:
        super().__init__()
        self.first = torch.nn.Linear(4, 4)
        self.second = torch.nn.Linear(4, 4)
        self.between = between

    def forward(self, x: torch.Tensor, *, mask: torch.Tensor | None = None) -> torch.Tensor:
        y = self.first(x) * self.between
        return self.second(y if mask is None else y * mask)


class Model(torch.nn.Module):
    def __init__(self, between: float = 1.0, factor: float = 2.0) -> None:
        super().__init__()
        self.block = Block(between)
        self.tail = Scale(factor)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tail(self.block(x, mask=torch.ones_like(x)))


def recorded(model: torch.nn.Module, x: torch.Tensor) -> tuple[ModuleRecorder, SideReport]:
    recorder = ModuleRecorder(model.named_modules())
    with torch.no_grad():
        output = model(x)
    recorder.close()
    report = SideReport(
        device="cpu", emulated=False, backing="cpu", rows=recorder.rows, inputs=recorder.inputs
    )
    report.output = [("", output)]
    return recorder, report


def run_both(original: Model, migrated: Model) -> tuple[SideReport, SideReport]:
    migrated.load_state_dict(original.state_dict())
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    _, ours = recorded(original, x)
    recorder, theirs = recorded(migrated, x)
    named = {name or "(model)": module for name, module in migrated.named_modules()}
    given = {key: tensor for key, _, tensor in ours.inputs}
    returned = {key: tensor for key, _, tensor in ours.rows}
    theirs.replayed = replay(recorder.calls, given, returned, named)
    return ours, theirs


def test_a_difference_made_between_two_callees_is_the_callers_and_hands_on_a_different_input() -> None:
    torch.manual_seed(0)
    ours, theirs = run_both(Model(), Model(between=1.01))
    comparison = compare_runs(ours, theirs, Thresholds(rule="tight"))
    own = {(row.module, row.key, row.handed): row.passed for row in comparison.own_rows}
    assert own[("block.first", "block.first", False)] and own[("block.second", "block.second", False)]
    assert own[("tail", "tail", False)], "given the original's input, the tail agrees"
    assert not own[("block", "block.second[0][0]", True)], "block hands its second layer another input"
    assert own[("(model)", "block[1].mask", True)], "the model's mask keyword is handed alike"
    assert comparison.first_divergence == "block"
    assert "in its own code: block.second is handed a different input" in comparison.problems[0]


def test_a_difference_inside_a_leaf_is_the_leafs_though_every_later_module_differs_too() -> None:
    torch.manual_seed(0)
    ours, theirs = run_both(Model(), Model(factor=2.02))
    comparison = compare_runs(ours, theirs, Thresholds(rule="tight"))
    assert comparison.first_divergence == "tail"
    failing = {row.module for row in comparison.own_rows if not row.passed}
    assert failing == {"tail"}, "the model's own code, its tail's output swapped in, agrees"


def test_a_call_whose_inputs_do_not_fit_the_original_is_left_unjudged() -> None:
    torch.manual_seed(0)
    model = Model()
    recorder, _ = recorded(model, torch.randn(3, 4))
    named = {name or "(model)": module for name, module in model.named_modules()}
    given = {key: tensor[:2] for key, _, tensor in recorder.inputs}  # another batch size
    returned = {key: tensor for key, _, tensor in recorder.rows}
    assert replay(recorder.calls, given, returned, named) == []


def test_a_difference_within_tolerance_that_grows_past_it_is_blamed_where_it_was_made() -> None:
    """Module a's own code changes its output by noise of 5e-5 (within float32's 1e-4, and not a
    shift); module b, given the original's input, computes exactly as the original, but it
    amplifies what it is handed past the tolerance. The blame is a, not b."""
    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(1000, generator=generator), torch.randn(1000, generator=generator)
    noisy = x + 5e-5 * x.abs() * torch.randn(1000, generator=generator)
    ours = SideReport(device="cpu", emulated=False, backing="cpu", rows=[("a", "a", x), ("b", "b", y)])
    theirs = SideReport(
        device="cpu", emulated=True, backing="cpu", rows=[("a", "a", noisy), ("b", "b", y * 1.001)]
    )
    ours.output, theirs.output = [("", y)], [("", y * 1.001)]
    theirs.replayed = [("a", False, "a", noisy), ("b", False, "b", y.clone())]
    comparison = compare_runs(ours, theirs, Thresholds(rule="tight"))
    assert all(row.passed for row in comparison.own_rows)
    assert comparison.first_divergence == "a"
    assert "its own code differs most, within tolerance" in comparison.problems[0]
    assert "grows past the tolerance by b" in comparison.problems[0]
