"""The emulated NPU's random state in torch_npu's form (emulation.philox): 16 bytes, a seed and an
offset, restored exactly; an offset a program computes (DTensor's shard offsets) is a stream of
its own, the same wherever it is asked for."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from npu_migrate.emulation.philox import PhiloxStates  # noqa: E402


def states(seed: int = 7) -> tuple[torch.Generator, PhiloxStates]:
    generator = torch.Generator().manual_seed(seed)
    return generator, PhiloxStates(generator)


def draw(generator: torch.Generator) -> torch.Tensor:
    return torch.randn(5, generator=generator)


def seed_and_offset(state: torch.Tensor) -> tuple[int, int]:
    """As DTensor's _PhiloxState reads them."""
    return int(state[:8].view(torch.uint64).item()), int(state[8:].view(torch.int64).item())


def test_the_state_is_a_seed_and_an_offset_and_comes_back_exactly() -> None:
    generator, philox = states(seed=7)
    saved = philox.get_state()
    assert saved.dtype == torch.uint8 and saved.shape == (16,)
    assert seed_and_offset(saved)[0] == 7
    first = draw(generator)
    philox.set_state(saved)
    assert torch.equal(draw(generator), first)


def test_the_offset_moves_on_when_numbers_are_drawn_and_stays_when_none_are() -> None:
    generator, philox = states()
    before = seed_and_offset(philox.get_state())[1]
    assert seed_and_offset(philox.get_state())[1] == before
    draw(generator)
    after = seed_and_offset(philox.get_state())[1]
    assert after > before and after % 4 == 0


def test_a_freshly_seeded_generator_is_offset_0_every_time_as_on_the_npu() -> None:
    """Megatron's own test of its RNG tracker (`tests/unit_tests/tensor_parallel/test_random.py`)
    seeds twice and compares the two states: on the NPU both are (seed, 0). The emulation handed
    out a new offset for each and failed the test where the device passes it."""
    generator, philox = states(seed=1111)
    assert seed_and_offset(philox.get_state()) == (1111, 0)
    draw(generator)
    drawn = philox.get_state()
    assert seed_and_offset(drawn)[1] > 0
    generator.manual_seed(1111)
    assert seed_and_offset(philox.get_state()) == (1111, 0)
    first = draw(generator)
    philox.set_state(drawn)  # a state handed out before comes back under its own offset
    assert seed_and_offset(philox.get_state()) == seed_and_offset(drawn)
    other = torch.Generator()  # another process: (seed, 0) is the seed's start there too
    PhiloxStates(other).set_state(torch.tensor([87, 4] + [0] * 14, dtype=torch.uint8))  # 1111, 0
    assert torch.equal(draw(other), first)


def test_a_computed_offset_is_a_stream_of_its_own_the_same_in_every_process() -> None:
    """DTensor adds each shard's place to the offset: every offset draws other numbers, and two
    ranks (two PhiloxStates over their own generators) asking for one offset draw the same."""
    (rank0, philox0), (rank1, philox1) = states(), states()
    state = philox0.get_state()
    shifted = state.clone()
    shifted[8:] = torch.tensor([1000], dtype=torch.int64).view(torch.uint8)
    philox0.set_state(shifted)
    philox1.set_state(shifted)
    at_the_shard = draw(rank0)
    assert torch.equal(draw(rank1), at_the_shard)
    philox0.set_state(state)
    assert not torch.equal(draw(rank0), at_the_shard)
    philox0.set_state(shifted)
    assert torch.equal(draw(rank0), at_the_shard)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (torch.zeros(16, dtype=torch.int64), "must be a torch.ByteTensor"),
        (torch.zeros(5056, dtype=torch.uint8), "wrong size"),
        (torch.zeros(32, dtype=torch.uint8)[::2], "must be contiguous"),
    ],
)
def test_a_state_the_npu_would_refuse_is_refused_with_its_words(bad: torch.Tensor, message: str) -> None:
    with pytest.raises((TypeError, RuntimeError), match=message):
        states()[1].set_state(bad)
