"""What a side records, unit by unit: live tensor memory on real model code."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from npu_migrate.verify.capture import LiveTensorBytes  # noqa: E402


def test_live_memory_counts_tensors_by_identity_not_by_value() -> None:
    """Membership by Tensor.__eq__ raised "Boolean value of Tensor ... is ambiguous" on ordinary
    model code (RMSNorm under no_grad, type_as under inference_mode): the tool's crash, blamed on
    the user's line."""
    x = torch.randn(3, 8)
    with LiveTensorBytes() as memory:
        with torch.no_grad():
            y = torch.nn.RMSNorm(8)(x)
        with torch.inference_mode():
            z = torch.zeros(4, 4).type_as(x)
        kept = memory.live
    assert y.shape == (3, 8) and z.shape == (4, 4)
    assert memory.peak >= 4 * (3 * 8 + 4 * 4)  # at least the two results, in fp32
    del y, z
    assert memory.live < kept  # freed tensors leave the count


def _raised_in(filename: str) -> BaseException:
    """An exception whose innermost frame claims to be in `filename`, raised through a user call."""
    namespace: dict = {}
    exec(compile("def boom():\n    raise ValueError('bad')\n", filename, "exec"), namespace)
    try:
        namespace["boom"]()
    except ValueError as exc:
        return exc
    raise AssertionError("not raised")


def test_a_failure_is_blamed_on_whose_code_raised_it(tmp_path) -> None:
    from npu_migrate.verify.side import EMULATION, EXIT_TOOL_ERROR, EXIT_USER_ERROR, PACKAGE, failure

    code, message = failure(_raised_in(str(tmp_path / "model.py")), tmp_path)
    assert code == EXIT_USER_ERROR and "model.py" in message and "npu-migrate" not in message
    code, message = failure(_raised_in(str(EMULATION / "ops.py")), tmp_path)
    assert code == EXIT_USER_ERROR and message.startswith("the NPU emulation stopped this call (ops.py:2)")
    code, message = failure(_raised_in(str(PACKAGE / "verify" / "capture.py")), tmp_path)
    assert code == EXIT_TOOL_ERROR and message.startswith("npu-migrate itself failed here")
    assert "capture.py" in message and "ValueError: bad" in message


def test_views_of_existing_tensors_are_no_new_memory() -> None:
    """At the dispatch level a view has no _base and reports its whole storage: a slice of a 4 MiB
    mask counted as 4 MiB made a correct GPT migration look 13x hungrier than the original."""
    mask = torch.ones(1024, 1024, dtype=torch.float32)
    with LiveTensorBytes() as memory:
        rows = [mask[i : i + 8] for i in range(0, 64, 8)]
        columns = mask.t()
        fresh = mask[:8] + 1  # 8 x 1024 floats: new memory
    assert rows and columns.shape == (1024, 1024)
    assert memory.peak == fresh.untyped_storage().nbytes() == 8 * 1024 * 4


def test_random_draws_are_named() -> None:
    from npu_migrate.verify.capture import RandomDraws

    x = torch.ones(4, 4)
    with RandomDraws() as quiet:
        torch.nn.functional.dropout(x, 0.5, training=False)
        x @ x
    with RandomDraws() as noisy:
        torch.nn.functional.dropout(x, 0.5, training=True)
        torch.randn_like(x)
        x.normal_()
    assert quiet.names == set()
    assert {"randn_like", "normal"} <= noisy.names and noisy.names & {"native_dropout", "bernoulli"}
