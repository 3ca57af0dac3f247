"""The NPU's random state as torch_npu hands it out: 16 bytes, a Philox seed (uint64) and offset
(int64), the form DTensor's RNG tracker reads and writes (it moves the offset by each shard's
place in the whole tensor). On the CPU backing the NPU draws from the backing's generator, so
that its numbers are the CPU original's; its states are kept here, one per (seed, offset) handed
out, and restored exactly when the program sets one back in the same process. An offset the
program computed (DTensor's) gets a state of its own drawn from its seed and offset: the same in
every rank, different for every offset, as Philox's streams are; so does a state from another
process, which no program on this host handed out (documented: not the same numbers there)."""

from __future__ import annotations

import struct
from collections import OrderedDict

import torch

_LAYOUT = struct.Struct("<Qq")  # seed, offset: DTensor views them as uint64 and int64
STATE_BYTES = _LAYOUT.size
_KEPT = 1024  # states remembered (about 5 KB each on the CPU), the least recently used dropped
_GOLDEN = 0x9E3779B97F4A7C15  # mixes seed and offset into one seed for an offset's own state


class PhiloxStates:
    """Philox-shaped states of one generator of the backing."""

    def __init__(self, generator: torch.Generator) -> None:
        self._generator = generator
        self._states: OrderedDict[tuple[int, int], torch.Tensor] = OrderedDict()
        self._keys: dict[bytes, tuple[int, int]] = {}  # each kept state's bytes -> its key
        self._current: tuple[int, int] | None = None
        self._next_offset = 4  # offset 0 is a freshly seeded generator's, as on the NPU

    def get_state(self) -> torch.Tensor:
        """The current state's 16 bytes: a freshly seeded generator's offset is 0 (every
        `manual_seed(s)` then hands out the same bytes, as the NPU does: Megatron's tracker test
        compares them), a state handed out before keeps its bytes, and any other gets a new
        offset, past every offset seen, a multiple of 4 as the NPU keeps them."""
        now = self._generator.get_state()
        key = self._current
        if key is None or key[0] != self._generator.initial_seed() or not torch.equal(self._states[key], now):
            key = self._keys.get(now.numpy().tobytes()) or self._new_key(now)
        self._states.move_to_end(key)
        self._current = key
        return _packed(*key)

    def _new_key(self, now: torch.Tensor) -> tuple[int, int]:
        seed = self._generator.initial_seed()
        fresh = torch.equal(torch.Generator().manual_seed(seed).get_state(), now)
        key = (seed, 0 if fresh else self._next_offset)
        self._keep(key, now)
        return key

    def set_state(self, new_state: torch.Tensor) -> None:
        """torch_npu's checks, then the state handed out for these 16 bytes, or the offset's own."""
        if new_state.dtype != torch.uint8:
            raise TypeError("RNG state must be a torch.ByteTensor")
        if not new_state.is_contiguous():
            raise RuntimeError("RNG state must be contiguous")
        if new_state.numel() != STATE_BYTES:
            raise RuntimeError("RNG state is wrong size")
        key = _unpacked(new_state)
        if key not in self._states:
            self._keep(key, _offsets_own_state(*key))
        self._states.move_to_end(key)
        self._generator.set_state(self._states[key])
        self._current = key

    def _keep(self, key: tuple[int, int], state: torch.Tensor) -> None:
        self._states[key] = state
        self._keys[state.numpy().tobytes()] = key
        self._next_offset = max(self._next_offset, key[1] + 4 - key[1] % 4)
        while len(self._states) > _KEPT:
            _, dropped = self._states.popitem(last=False)
            self._keys.pop(dropped.numpy().tobytes(), None)


def _packed(seed: int, offset: int) -> torch.Tensor:
    return torch.frombuffer(bytearray(_LAYOUT.pack(seed, offset)), dtype=torch.uint8)


def _unpacked(state: torch.Tensor) -> tuple[int, int]:
    seed, offset = _LAYOUT.unpack(bytes(state.detach().cpu().tolist()))
    return seed, offset


def _offsets_own_state(seed: int, offset: int) -> torch.Tensor:
    """Offset 0 is the seed's own start (what `manual_seed(seed)` leaves); others mix the two."""
    mixed = (seed * _GOLDEN + offset) % 2**64 if offset else seed
    return torch.Generator().manual_seed(mixed).get_state()
