"""Attention as the CUDA attention libraries define it, in plain torch: the reference the
stand-ins for flash-attn, xformers and Transformer Engine compute with on the original side.

Everything is computed in float32 and the output cast to the value's dtype, as the kernels
accumulate in float32. Tensors are [batch, heads, seq, dim] here; each library's module
rearranges its own layout. Grouped key/value heads serve consecutive query heads (head h of
the query reads key head h // (heads / key_heads)), as flash-attn documents."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

Tensor = torch.Tensor


@dataclass(frozen=True)
class Window:
    """Which keys a query may read, by position: `left`/`right` keys before/after the query's
    diagonal (None: unbounded). `bottom_right`: the diagonal ends at the last key, as
    flash-attn >= 2.1 aligns it when there are more keys than queries; else it starts at key 0."""

    left: int | None = None
    right: int | None = None
    bottom_right: bool = True

    @classmethod
    def causal(cls, bottom_right: bool = True) -> Window:
        return cls(None, 0, bottom_right)

    @classmethod
    def flash(cls, window_size: tuple[int, int], causal: bool, bottom_right: bool = True) -> Window:
        """flash-attn's (left, right) window, -1 meaning unbounded; causal sets right to 0."""
        left, right = (None if size < 0 else int(size) for size in window_size)
        return cls(left, 0 if causal else right, bottom_right)

    @property
    def unbounded(self) -> bool:
        return self.left is None and self.right is None

    def allowed(self, queries: int, keys: int, device: torch.device) -> Tensor:
        """[queries, keys]: True where the query may read the key."""
        row = torch.arange(queries, device=device).unsqueeze(1)
        col = torch.arange(keys, device=device)
        diagonal = row + (keys - queries if self.bottom_right else 0)
        allowed = torch.ones(queries, keys, dtype=torch.bool, device=device)
        if self.right is not None:
            allowed &= col <= diagonal + self.right
        if self.left is not None:
            allowed &= col >= diagonal - self.left
        return allowed


def alibi_bias(slopes: Tensor, queries: int, keys: int, bottom_right: bool = True) -> Tensor:
    """flash-attn's ALiBi: -slope * |i + keys - queries - j|, slopes [heads] or [batch, heads]."""
    row = torch.arange(queries, device=slopes.device).unsqueeze(1)
    col = torch.arange(keys, device=slopes.device)
    distance = (row + (keys - queries if bottom_right else 0) - col).abs().float()
    slopes = slopes.float()
    shaped = slopes.view(1, -1, 1, 1) if slopes.dim() == 1 else slopes.view(*slopes.shape, 1, 1)
    return -shaped * distance


@dataclass
class Attended:
    out: Tensor  # [b, h, sq, dv], in the value's dtype
    lse: Tensor  # [b, h, sq] float32: log-sum-exp of the scaled scores, +inf where no key is read
    probs: Tensor  # [b, h, sq, sk] float32 after dropout (a dropped entry is negative, as flash-attn's)


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    scale: float | None = None,
    window: Window | None = None,
    bias: Tensor | None = None,
    softcap: float = 0.0,
    dropout_p: float = 0.0,
) -> Attended:
    """softmax(scale * q k^T [softcapped, masked by the window, plus the additive bias]) v.
    A query that may read no key gets zeros (as the kernels write). Autocast does not reach
    inside a kernel: the float32 math stays float32 under it."""
    with torch.autocast(q.device.type, enabled=False):
        return _attend(q, k, v, scale, window, bias, softcap, dropout_p)


def _attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scale: float | None,
    window: Window | None,
    bias: Tensor | None,
    softcap: float,
    dropout_p: float,
) -> Attended:
    heads, key_heads = q.shape[1], k.shape[1]
    if heads % key_heads:
        raise RuntimeError("Number of heads in key/value must divide number of heads in query")
    if heads != key_heads:
        k = k.repeat_interleave(heads // key_heads, dim=1)
        v = v.repeat_interleave(heads // key_heads, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if softcap > 0:
        scores = torch.tanh(scores / softcap) * softcap
    if window is not None and not window.unbounded:
        scores = scores.masked_fill(~window.allowed(q.shape[2], k.shape[2], q.device), float("-inf"))
    if bias is not None:
        scores = scores + bias.float()
    lse = torch.logsumexp(scores, dim=-1)
    unread = torch.isneginf(lse)
    probs = torch.exp(scores - lse.masked_fill(unread, 0.0).unsqueeze(-1)).masked_fill(
        unread.unsqueeze(-1), 0.0
    )
    kept = F.dropout(probs, dropout_p, training=True) if dropout_p > 0 else probs
    out = torch.matmul(kept, v.float()).to(v.dtype)
    dropped = torch.where((kept == 0) & (probs > 0), -probs, kept) if dropout_p > 0 else kept
    return Attended(out, lse.masked_fill(unread, float("inf")), dropped)


def segments(cu_seqlens: Tensor) -> list[tuple[int, int]]:
    """The (start, end) rows of each sequence packed along the first axis."""
    bounds = [int(b) for b in cu_seqlens.tolist()]
    return list(itertools.pairwise(bounds))


def attend_packed(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor,
    *,
    scale: float | None = None,
    window: Window | None = None,
    alibi_slopes: Tensor | None = None,
    softcap: float = 0.0,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor, list[Tensor]]:
    """Variable-length attention over sequences packed along the first axis ([total, heads, dim]):
    each sequence attends within itself (ALiBi slopes [heads] or [sequences, heads]). The output
    is [total_q, heads, dv] (rows past the last sequence stay zero), the log-sum-exp
    [heads, total_q], and each sequence's probabilities."""
    out = q.new_zeros(q.shape[0], q.shape[1], v.shape[-1], dtype=v.dtype)
    lse = torch.full((q.shape[1], q.shape[0]), float("inf"), device=q.device)
    probs = []
    bottom_right = window.bottom_right if window is not None else True
    for index, ((qs, qe), (ks, ke)) in enumerate(
        zip(segments(cu_seqlens_q), segments(cu_seqlens_k), strict=True)
    ):
        bias = None
        if alibi_slopes is not None:
            slopes = alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[index]
            bias = alibi_bias(slopes, qe - qs, ke - ks, bottom_right)
        one = attend(
            *(t.transpose(0, 1).unsqueeze(0) for t in (q[qs:qe], k[ks:ke], v[ks:ke])),
            scale=scale, window=window, bias=bias, softcap=softcap, dropout_p=dropout_p,
        )  # fmt: skip
        out[qs:qe] = one.out[0].transpose(0, 1)
        lse[:, qs:qe] = one.lse[0]
        probs.append(one.probs[0])
    return out, lse, probs
