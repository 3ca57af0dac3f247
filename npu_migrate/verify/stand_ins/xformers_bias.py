"""xformers' attention biases (`xformers.ops.fmha.attn_bias`): masks described by shape instead
of held as tensors. Each says, block by block, which keys a query reads (a `Window`), and
`materialize` writes it out as the additive bias (0 read, -inf not) the stand-in attends with."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from npu_migrate.verify.stand_ins.attention import Window

Tensor = torch.Tensor


class AttentionBias:
    """A bias added to Q K^T, known by its form."""

    def materialize(
        self, shape: tuple[int, ...], dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
    ) -> Tensor:
        raise NotImplementedError

    def to(self, device: torch.device | str) -> AttentionBias:
        return self


def _window_bias(
    window: Window, shape: tuple[int, ...], dtype: torch.dtype, device: str | torch.device
) -> Tensor:
    allowed = window.allowed(shape[-2], shape[-1], torch.device(device))
    zero = torch.zeros((), dtype=dtype, device=device)
    return torch.where(allowed, zero, torch.full((), -math.inf, dtype=dtype, device=device)).expand(shape)


class LowerTriangularMask(AttentionBias):
    """Causal from the top left: query i reads keys 0..i."""

    window = Window.causal(bottom_right=False)

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def materialize(
        self, shape: tuple[int, ...], dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
    ) -> Tensor:
        return _window_bias(self.window, shape, dtype, device)

    def add_bias(self, bias: Tensor) -> LowerTriangularMaskWithTensorBias:
        return LowerTriangularMaskWithTensorBias(bias)


class LowerTriangularMaskWithTensorBias(LowerTriangularMask):
    def __init__(self, bias: Tensor) -> None:
        self._bias = bias

    def materialize(
        self, shape: tuple[int, ...], dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
    ) -> Tensor:
        return super().materialize(shape, dtype, device) + self._bias


class LowerTriangularFromBottomRightMask(AttentionBias):
    """Causal with the last query reading the last key."""

    window = Window.causal(bottom_right=True)

    def materialize(
        self, shape: tuple[int, ...], dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
    ) -> Tensor:
        return _window_bias(self.window, shape, dtype, device)

    def make_local_attention(self, window_size: int) -> LowerTriangularFromBottomRightLocalAttentionMask:
        return LowerTriangularFromBottomRightLocalAttentionMask(window_size)


class LowerTriangularFromBottomRightLocalAttentionMask(LowerTriangularFromBottomRightMask):
    """Causal from the bottom right, reading the `window_size` keys up to the diagonal."""

    def __init__(self, _window_size: int) -> None:
        if _window_size <= 0:
            raise ValueError(f"Expected `window_size > 0`, but window_size={_window_size}")
        self._window_size = _window_size
        self.window = Window(_window_size - 1, 0, bottom_right=True)


@dataclass
class LocalAttentionFromBottomRightMask(AttentionBias):
    """Query q reads key k where q - window_left <= k + (queries - keys) <= q + window_right."""

    window_left: int
    window_right: int

    def __post_init__(self) -> None:
        if self.window_left < 0 or self.window_right < 0:
            raise ValueError("Invalid window value passed to `LocalAttentionFromBottomRightMask`")

    def materialize(
        self, shape: tuple[int, ...], dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
    ) -> Tensor:
        return _window_bias(Window(self.window_left, self.window_right), shape, dtype, device)


@dataclass
class _SeqLenInfo:
    """One axis cut into consecutive blocks (sequences packed along it)."""

    seqstart_py: list[int]
    seqstart: Tensor = field(init=False)
    max_seqlen: int = field(init=False)
    min_seqlen: int = field(init=False)

    def __post_init__(self) -> None:
        lengths = [end - start for start, end in self.intervals()]
        self.seqstart = torch.tensor(self.seqstart_py, dtype=torch.int32)
        self.max_seqlen, self.min_seqlen = max(lengths, default=-1), min(lengths, default=-1)

    @classmethod
    def from_seqlens(cls, seqlens: Sequence[int], *, device: torch.device | None = None) -> _SeqLenInfo:
        starts = [0]
        for length in seqlens:
            starts.append(starts[-1] + int(length))
        return cls(starts)

    def intervals(self) -> list[tuple[int, int]]:
        return list(itertools.pairwise(self.seqstart_py))

    def to(self, device: torch.device | str) -> _SeqLenInfo:
        return self

    def split(self, x: Tensor, batch_sizes: Sequence[int] | None = None) -> list[Tensor]:
        """[1, total, ...] back into one tensor per block (or per batch of blocks)."""
        if x.shape[0] != 1:
            raise ValueError(f"Invalid `x` shape {tuple(x.shape)}: expected a batch of 1")
        blocks = [x[:, start:end] for start, end in self.intervals()]
        if batch_sizes is None:
            return blocks
        grouped, index = [], 0
        for size in batch_sizes:
            grouped.append(torch.cat(blocks[index : index + size]).reshape(size, -1, *x.shape[2:]))
            index += size
        return grouped


@dataclass
class BlockDiagonalMask(AttentionBias):
    """Sequences packed along the tokens of a batch of one: queries of block i read keys of
    block i only (each block as `_block` says: all of it, causal, local)."""

    q_seqinfo: _SeqLenInfo
    k_seqinfo: _SeqLenInfo
    _batch_sizes: Sequence[int] | None = None

    def __post_init__(self) -> None:
        """What the block form requires of the blocks (subclasses)."""

    def _block(self) -> Window:
        return Window()

    def materialize(
        self, shape: tuple[int, ...], dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
    ) -> Tensor:
        if shape[-1] != self.k_seqinfo.seqstart_py[-1] or shape[-2] != self.q_seqinfo.seqstart_py[-1]:
            raise AssertionError((shape, self.q_seqinfo.seqstart_py[-1], self.k_seqinfo.seqstart_py[-1]))
        mask = torch.full(shape[-2:], -math.inf, dtype=dtype, device=device)
        for (qs, qe), (ks, ke) in zip(self.q_seqinfo.intervals(), self.k_seqinfo.intervals(), strict=True):
            mask[qs:qe, ks:ke] = _window_bias(self._block(), (qe - qs, ke - ks), dtype, device)
        return mask.expand(shape)

    @classmethod
    def from_seqlens(
        cls,
        q_seqlen: Sequence[int],
        kv_seqlen: Sequence[int] | None = None,
        *,
        device: torch.device | None = None,
    ) -> BlockDiagonalMask:
        if kv_seqlen is not None and len(q_seqlen) != len(kv_seqlen):
            raise AssertionError("as many key blocks as query blocks")
        q_info = _SeqLenInfo.from_seqlens(q_seqlen)
        k_info = (
            q_info
            if kv_seqlen is None or list(q_seqlen) == list(kv_seqlen)
            else _SeqLenInfo.from_seqlens(kv_seqlen)
        )
        return cls(q_seqinfo=q_info, k_seqinfo=k_info)

    @classmethod
    def from_tensor_list(cls, tensors: Sequence[Tensor]) -> tuple[BlockDiagonalMask, Tensor]:
        """The tensors ([B_i, M_i, ...]) packed into one [1, sum B_i M_i, ...], and their mask."""
        mask = cls.from_seqlens([t.shape[1] for t in tensors for _ in range(t.shape[0])])
        mask._batch_sizes = [t.shape[0] for t in tensors]
        return mask, torch.cat([t.reshape(1, -1, *t.shape[2:]) for t in tensors], dim=1)

    def split_queries(self, tensor: Tensor) -> list[Tensor]:
        return self.q_seqinfo.split(tensor, self._batch_sizes)

    def split_kv(self, tensor: Tensor) -> list[Tensor]:
        return self.k_seqinfo.split(tensor, self._batch_sizes)

    def split(self, tensor: Tensor) -> list[Tensor]:
        return self.q_seqinfo.split(tensor, self._batch_sizes)

    def _as(self, kind: type[BlockDiagonalMask], **more: int) -> BlockDiagonalMask:
        made = kind(q_seqinfo=self.q_seqinfo, k_seqinfo=self.k_seqinfo, _batch_sizes=self._batch_sizes)
        for name, value in more.items():
            setattr(made, name, value)
        return made

    def make_causal(self) -> BlockDiagonalMask:
        return self._as(BlockDiagonalCausalMask)

    def make_causal_from_bottomright(self) -> BlockDiagonalMask:
        return self._as(BlockDiagonalCausalFromBottomRightMask)

    def make_local_attention(self, window_size: int) -> BlockDiagonalMask:
        return self._as(BlockDiagonalCausalLocalAttentionMask, _window_size=window_size)

    def make_local_attention_from_bottomright(self, window_size: int) -> BlockDiagonalMask:
        return self._as(BlockDiagonalCausalLocalAttentionFromBottomRightMask, _window_size=window_size)


class BlockDiagonalCausalMask(BlockDiagonalMask):
    """Each block causal from its top left."""

    def _block(self) -> Window:
        return Window.causal(bottom_right=False)


class BlockDiagonalCausalFromBottomRightMask(BlockDiagonalMask):
    """Each block causal from its bottom right (a prefix of keys every query reads); a block
    needs as many keys as queries."""

    def __post_init__(self) -> None:
        for index, ((qs, qe), (ks, ke)) in enumerate(
            zip(self.q_seqinfo.intervals(), self.k_seqinfo.intervals(), strict=True)
        ):
            if ke - ks < qe - qs:
                raise ValueError(
                    f"Block #{index} has num_keys={ke - ks} and num_queries={qe - qs}. "
                    "Expected `num_keys >= num_queries`"
                )

    def _block(self) -> Window:
        return Window.causal(bottom_right=True)


class BlockDiagonalCausalLocalAttentionMask(BlockDiagonalMask):
    """Each block causal from its top left, reading the `_window_size` keys up to the diagonal."""

    _window_size: int = 0

    def _block(self) -> Window:
        return Window(self._window_size - 1, 0, bottom_right=False)


class BlockDiagonalCausalLocalAttentionFromBottomRightMask(BlockDiagonalCausalFromBottomRightMask):
    """As BlockDiagonalCausalLocalAttentionMask, the diagonal ending at each block's last key."""

    _window_size: int = 0

    def _block(self) -> Window:
        return Window(self._window_size - 1, 0, bottom_right=True)
