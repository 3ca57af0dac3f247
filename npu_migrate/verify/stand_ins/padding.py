"""flash-attn's `bert_padding`: moving between padded batches [b, s, ...] and the packed rows of
the tokens a mask keeps [total, ...], with the cumulative lengths its varlen functions take."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from npu_migrate.verify.stand_ins import versions

Tensor = torch.Tensor


def index_first_axis(rows: Tensor, indices: Tensor) -> Tensor:
    return rows[indices]


def index_put_first_axis(values: Tensor, indices: Tensor, first_axis_dim: int) -> Tensor:
    out = values.new_zeros(first_axis_dim, *values.shape[1:])
    out[indices] = values
    return out


def unpad_input(hidden_states: Tensor, attention_mask: Tensor, unused_mask: Tensor | None = None) -> Any:
    """(rows, indices, cu_seqlens, max_seqlen[, used_seqlens]): the fifth from flash-attn 2.7."""
    kept = attention_mask + unused_mask if unused_mask is not None else attention_mask
    lengths = kept.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(kept.flatten(), as_tuple=False).flatten()
    cu_seqlens = F.pad(torch.cumsum(lengths, dim=0, dtype=torch.int32), (1, 0))
    rows = index_first_axis(hidden_states.flatten(0, 1), indices)
    packed = (rows, indices, cu_seqlens, int(lengths.max().item()))
    if versions.at_least("flash_attn", "2.7"):
        return (*packed, attention_mask.sum(dim=-1, dtype=torch.int32))
    return packed


def pad_input(hidden_states: Tensor, indices: Tensor, batch: int, seqlen: int) -> Tensor:
    return index_put_first_axis(hidden_states, indices, batch * seqlen).unflatten(0, (batch, seqlen))


def unpad_input_for_concatenated_sequences(hidden_states: Tensor, attention_mask_in_length: Tensor) -> Any:
    """Several samples packed in each row: the mask holds each sample's length, in order."""
    total = attention_mask_in_length.sum(dim=-1)
    seqlen = attention_mask_in_length.size(-1)
    positions = torch.arange(seqlen, device=total.device, dtype=total.dtype)
    kept = positions.expand(len(total), seqlen) < total.unsqueeze(1)
    lengths = attention_mask_in_length.flatten()
    lengths = lengths[lengths != 0]
    indices = torch.nonzero(kept.flatten(), as_tuple=False).flatten()
    cu_seqlens = F.pad(torch.cumsum(lengths, dim=0, dtype=torch.int32), (1, 0))
    rows = index_first_axis(hidden_states.flatten(0, 1), indices)
    return rows, indices, cu_seqlens, int(lengths.max().item())
