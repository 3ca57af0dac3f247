"""flash-attn's `layers.rotary.apply_rotary_emb`: rotary position embedding over the first
2 * cos.shape[-1] channels of each head, halves rotated (GPT-NeoX) or pairs (GPT-J, interleaved)."""

from __future__ import annotations

import torch

Tensor = torch.Tensor


def _rotated(x: Tensor, interleaved: bool) -> Tensor:
    if interleaved:
        even, odd = x[..., ::2], x[..., 1::2]
        return torch.stack((-odd, even), dim=-1).flatten(-2)
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def _rotate(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool) -> Tensor:
    """x [..., s, h, d]; cos, sin [..., s, rotary_dim / 2], one row per position of x."""
    width = cos.shape[-1] * 2
    if width > x.shape[-1]:
        raise AssertionError("rotary_dim must be <= headdim")
    spread = (lambda t: t.repeat_interleave(2, -1)) if interleaved else (lambda t: torch.cat((t, t), -1))
    cos, sin = spread(cos).unsqueeze(-2), spread(sin).unsqueeze(-2)
    head = x[..., :width].float()
    turned = head * cos.float() + _rotated(head, interleaved) * sin.float()
    return torch.cat((turned.to(x.dtype), x[..., width:]), dim=-1)


def apply_rotary_emb(
    x: Tensor,
    cos: Tensor,
    sin: Tensor,
    interleaved: bool = False,
    inplace: bool = False,
    seqlen_offsets: int | Tensor = 0,
    cu_seqlens: Tensor | None = None,
    max_seqlen: int | None = None,
) -> Tensor:
    """x [b, s, h, d], or [total, h, d] with cu_seqlens; position p of a sequence reads row
    p + its offset (seqlen_offsets: an int or one per sequence) of cos and sin."""
    if cu_seqlens is None:
        positions = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
        starts = torch.as_tensor(seqlen_offsets, device=x.device).reshape(-1, 1)
        rows = (positions + starts).expand(x.shape[0], -1)
    else:
        bounds = cu_seqlens.tolist()
        offsets = torch.as_tensor(seqlen_offsets, device=x.device).expand(len(bounds) - 1).tolist()
        rows = torch.cat([
            torch.arange(int(start), int(end), device=x.device) - int(start) + int(offset)
            for start, end, offset in zip(bounds[:-1], bounds[1:], offsets, strict=True)
        ])  # fmt: skip
    out = _rotate(x, cos[rows], sin[rows], interleaved)
    if inplace:
        x.copy_(out)
        return x
    return out


apply_rotary_emb_func = apply_rotary_emb
