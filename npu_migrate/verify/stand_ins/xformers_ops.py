"""xformers' `ops.memory_efficient_attention` in plain torch: [B, M, K], [B, M, H, K] or
[B, M, G, H, K] inputs, a tensor or `attn_bias` type as the bias, dropout `p`, the output in the
query's dtype (or `output_dtype`). The `op` argument picks a kernel and changes nothing here."""

from __future__ import annotations

from typing import Any

import torch

from npu_migrate.verify.stand_ins.attention import attend
from npu_migrate.verify.stand_ins.xformers_bias import AttentionBias

Tensor = torch.Tensor


def _heads_first(x: Tensor) -> Tensor:
    """[B, M, K] / [B, M, H, K] / [B, M, G, H, K] as [B, (G H), M, K]."""
    if x.dim() == 3:
        return x.unsqueeze(1)
    if x.dim() == 4:
        return x.transpose(1, 2)
    if x.dim() == 5:
        return x.permute(0, 2, 3, 1, 4).flatten(1, 2)
    raise ValueError(f"Query/Key/Value should all have BMK, BMHK or BMGHK shape, got {tuple(x.shape)}")


def memory_efficient_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_bias: Tensor | AttentionBias | None = None,
    p: float = 0.0,
    scale: float | None = None,
    *,
    op: Any = None,
    output_dtype: torch.dtype | None = None,
) -> Tensor:
    if not query.dim() == key.dim() == value.dim():
        raise ValueError("Query/Key/Value should all have the same number of dimensions")
    if query.shape[-1] != key.shape[-1] or key.shape[:-1] != value.shape[:-1]:
        shapes = ", ".join(f"{n} {tuple(t.shape)}" for n, t in zip("qkv", (query, key, value), strict=True))
        raise ValueError(f"Incompatible shapes: {shapes}")
    if query.dim() > 3 and query.shape[-2] != key.shape[-2]:
        raise ValueError("Query and Key/Value must have the same number of heads (expand them, or use BMGHK)")
    q, k, v = (_heads_first(t) for t in (query, key, value))
    full = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    bias = None
    if isinstance(attn_bias, AttentionBias):
        bias = attn_bias.materialize(full, dtype=torch.float32, device=q.device)
    elif attn_bias is not None:
        bias = attn_bias if query.dim() != 5 else attn_bias.flatten(1, 2)
        bias = bias.unsqueeze(1) if query.dim() == 3 and bias.dim() == 3 else bias
    out = attend(q, k, v, scale=scale, bias=bias, dropout_p=p).out
    shaped = {3: lambda o: o[:, 0], 4: lambda o: o.transpose(1, 2)}.get(query.dim())
    result = shaped(out) if shaped else out.unflatten(1, query.shape[2:4]).permute(0, 3, 1, 2, 4)
    return result.to(output_dtype or query.dtype)


memory_efficient_attention_forward = memory_efficient_attention


def unbind(x: Tensor, dim: int) -> tuple[Tensor, ...]:
    return x.unbind(dim)
