"""`--realistic-weights` redraws what a model has, an empty parameter included (it has nothing
to draw: `nn.Linear(4, 0)`, a head with no classes), instead of failing on its fan-in."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from npu_migrate.verify.side import _realistic_weights  # noqa: E402


def test_an_empty_parameter_is_left_and_the_others_redrawn():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 0))
    before = [p.detach().clone() for p in model.parameters()]
    _realistic_weights(model)
    after = list(model.parameters())
    assert after[2].shape == (0, 8) and after[3].shape == (0,)
    assert not torch.equal(before[0], after[0])  # std 1/sqrt(4), not the fresh init's
    assert abs(after[0].std().item() - 0.5) < 0.25
