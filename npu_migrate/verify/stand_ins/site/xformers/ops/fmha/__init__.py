"""xformers.ops.fmha (npu_migrate.verify.stand_ins)."""

from npu_migrate.verify.stand_ins.xformers_bias import AttentionBias, BlockDiagonalMask, LowerTriangularMask
from npu_migrate.verify.stand_ins.xformers_ops import (
    memory_efficient_attention,
    memory_efficient_attention_forward,
)

from . import attn_bias

__all__ = [
    "AttentionBias",
    "BlockDiagonalMask",
    "LowerTriangularMask",
    "attn_bias",
    "memory_efficient_attention",
    "memory_efficient_attention_forward",
]
