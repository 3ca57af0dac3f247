"""npu-migrate's plain-torch stand-in for FlashAttention 3's `flash_attn_interface` (hopper):
no dropout; half types and float8 e4m3; results as the release stood in for returns them."""

from typing import Any

import torch

from npu_migrate.verify.stand_ins import flash

Tensor = torch.Tensor


def _check(q: Tensor, seqused_q: Any = None, seqused_k: Any = None, **unsupported: Any) -> None:
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float8_e4m3fn):
        raise AssertionError("FlashAttention-3 only supports fp16, bf16 and fp8_e4m3")
    if seqused_q is not None or seqused_k is not None:
        raise NotImplementedError("npu-migrate's FlashAttention 3 stand-in has no seqused_q/seqused_k")
    given = [name for name, value in unsupported.items() if value not in (None, 0, 1, False)]
    if given:
        raise NotImplementedError(f"npu-migrate's FlashAttention 3 stand-in has no {', '.join(given)}")


def flash_attn_func(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    softmax_scale: float | None = None,
    causal: bool = False,
    qv: Tensor | None = None,
    q_descale: Tensor | None = None,
    k_descale: Tensor | None = None,
    v_descale: Tensor | None = None,
    window_size: tuple[int, int] = (-1, -1),
    attention_chunk: int = 0,
    softcap: float = 0.0,
    num_splits: int = 1,
    pack_gqa: bool | None = None,
    deterministic: bool = False,
    sm_margin: int = 0,
    return_attn_probs: bool = False,
) -> Any:
    _check(
        q,
        qv=qv,
        q_descale=q_descale,
        k_descale=k_descale,
        v_descale=v_descale,
        attention_chunk=attention_chunk,
    )
    half = q.dtype if q.dtype != torch.float8_e4m3fn else torch.bfloat16
    out, lse, _ = flash.flash_attn_func(
        q.to(half), k.to(half), v.to(half), 0.0, softmax_scale, causal, window_size, softcap,
        return_attn_probs=True,
    )  # fmt: skip
    return flash.flash_attn_3_results(out, lse, return_attn_probs)


def flash_attn_varlen_func(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    seqused_q: Tensor | None = None,
    seqused_k: Tensor | None = None,
    softmax_scale: float | None = None,
    causal: bool = False,
    qv: Tensor | None = None,
    q_descale: Tensor | None = None,
    k_descale: Tensor | None = None,
    v_descale: Tensor | None = None,
    window_size: tuple[int, int] = (-1, -1),
    attention_chunk: int = 0,
    softcap: float = 0.0,
    num_splits: int = 1,
    pack_gqa: bool | None = None,
    deterministic: bool = False,
    sm_margin: int = 0,
    return_attn_probs: bool = False,
) -> Any:
    _check(
        q, seqused_q, seqused_k, qv=qv, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
        attention_chunk=attention_chunk,
    )  # fmt: skip
    half = q.dtype if q.dtype != torch.float8_e4m3fn else torch.bfloat16
    out, lse, _ = flash.flash_attn_varlen_func(
        q.to(half), k.to(half), v.to(half), cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
        0.0, softmax_scale, causal, window_size, softcap, return_attn_probs=True,
    )  # fmt: skip
    return flash.flash_attn_3_results(out, lse, return_attn_probs)


def flash_attn_qkvpacked_func(qkv: Tensor, *args: Any, **kwargs: Any) -> Any:
    """qkv [b, s, 3, h, d]."""
    return flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], *args, **kwargs)


__version__ = flash.versions.of("flash_attn_interface")
