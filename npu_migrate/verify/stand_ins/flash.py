"""flash-attn's Python API (2.x, and FlashAttention 3's `flash_attn_interface`) in plain torch,
with the library's documented semantics and its own input checks: half types only, one dtype,
head dim at most 256, key heads dividing query heads. The original side of `verify` imports it
where the real library cannot run (site/flash_attn, site/flash_attn_interface.py)."""

from __future__ import annotations

from typing import Any

import torch

from npu_migrate.verify.stand_ins import versions
from npu_migrate.verify.stand_ins.attention import Window, alibi_bias, attend, attend_packed

Tensor = torch.Tensor


def _check(q: Tensor, k: Tensor, v: Tensor) -> None:
    """What flash-attn's kernels refuse, in their words (csrc/flash_attn/flash_api.cpp)."""
    if q.dtype not in (torch.float16, torch.bfloat16):
        raise RuntimeError("FlashAttention only support fp16 and bf16 data type")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise RuntimeError("query and key must have the same dtype")
    if q.shape[-1] > 256:
        raise RuntimeError("FlashAttention forward only supports head dimension at most 256")
    if q.shape[-2] % k.shape[-2]:
        raise RuntimeError("Number of heads in key/value must divide number of heads in query")


def _window(window_size: Any, causal: bool) -> Window:
    """Causal and local windows end at the last key (flash-attn >= 2.1), else at key 0."""
    return Window.flash(tuple(window_size), causal, bottom_right=versions.at_least("flash_attn", "2.1"))


def _results(out: Tensor, lse: Tensor, probs: Any, return_attn_probs: bool) -> Any:
    return (out, lse, probs) if return_attn_probs else out


def flash_attn_func(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: Tensor | None = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
) -> Any:
    """q [b, sq, h, d], k and v [b, sk, hk, d] -> [b, sq, h, d] (with the log-sum-exp
    [b, h, sq] and the probabilities [b, h, sq, sk] if `return_attn_probs`)."""
    _check(q, k, v)
    window = _window(window_size, causal)
    bias = None
    if alibi_slopes is not None:
        bias = alibi_bias(alibi_slopes, q.shape[1], k.shape[1], window.bottom_right)
    one = attend(
        *(t.transpose(1, 2) for t in (q, k, v)),
        scale=softmax_scale, window=window, bias=bias, softcap=softcap, dropout_p=dropout_p,
    )  # fmt: skip
    return _results(one.out.transpose(1, 2), one.lse, one.probs, return_attn_probs)


def flash_attn_kvpacked_func(q: Tensor, kv: Tensor, *args: Any, **kwargs: Any) -> Any:
    """kv [b, sk, 2, hk, d]."""
    return flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], *args, **kwargs)


def flash_attn_qkvpacked_func(qkv: Tensor, *args: Any, **kwargs: Any) -> Any:
    """qkv [b, s, 3, h, d]."""
    return flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], *args, **kwargs)


def flash_attn_varlen_func(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: Tensor | None = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    block_table: Tensor | None = None,
) -> Any:
    """Sequences packed along the first axis: q [total_q, h, d], k and v [total_k, hk, d],
    delimited by the cumulative lengths -> [total_q, h, d] (the log-sum-exp [h, total_q])."""
    _check(q, k, v)
    if block_table is not None:
        raise NotImplementedError("npu-migrate's flash-attn stand-in has no paged KV cache (block_table)")
    out, lse, probs = attend_packed(
        q, k, v, cu_seqlens_q, cu_seqlens_k,
        scale=softmax_scale, window=_window(window_size, causal), alibi_slopes=alibi_slopes,
        softcap=softcap, dropout_p=dropout_p,
    )  # fmt: skip
    return _results(out, lse, probs, return_attn_probs)


def flash_attn_varlen_kvpacked_func(
    q: Tensor, kv: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, *args: Any, **kwargs: Any
) -> Any:
    """kv [total_k, 2, hk, d]."""
    return flash_attn_varlen_func(q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k, *args, **kwargs)


def flash_attn_varlen_qkvpacked_func(
    qkv: Tensor, cu_seqlens: Tensor, max_seqlen: int, *args: Any, **kwargs: Any
) -> Any:
    """qkv [total, 3, h, d], one set of cumulative lengths for queries and keys."""
    q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
    return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, *args, **kwargs)


def _flash_attn_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    dropout_p: float,
    softmax_scale: float,
    causal: bool,
    window_size_left: int = -1,
    window_size_right: int = -1,
    softcap: float = 0.0,
    alibi_slopes: Tensor | None = None,
    return_softmax: bool = False,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor]:
    """The private forward frameworks call (HunyuanVideo, ring attention), as of flash-attn 2.7:
    (out, softmax_lse, S_dmask, rng_state)."""
    out, lse, probs = flash_attn_func(
        q, k, v, dropout_p, softmax_scale, causal, (window_size_left, window_size_right), softcap,
        alibi_slopes, return_attn_probs=True,
    )  # fmt: skip
    return out, lse, probs if return_softmax else None, torch.zeros(2, dtype=torch.int64)


def flash_attn_with_kvcache(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError(
        "npu-migrate's flash-attn stand-in has no flash_attn_with_kvcache: give the original a "
        "path without the KV cache (verify compares one forward and training steps)"
    )


def flash_attn_3_results(out: Tensor, lse: Tensor, return_attn_probs: bool) -> Any:
    """FlashAttention 3's betas (3.0.0b1, to July 2025) return (out, softmax_lse), which the
    DiTs of 2025 index (`out = ...(...)[0]`); 3.0.0 returns `out` alone unless asked."""
    if return_attn_probs or not versions.at_least("flash_attn_interface", "3.0.0"):
        return out, lse
    return out
