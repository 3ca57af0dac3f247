"""xformers.ops.fmha.attn_bias (npu_migrate.verify.stand_ins.xformers_bias)."""

from npu_migrate.verify.stand_ins.xformers_bias import (
    AttentionBias,
    BlockDiagonalCausalFromBottomRightMask,
    BlockDiagonalCausalLocalAttentionFromBottomRightMask,
    BlockDiagonalCausalLocalAttentionMask,
    BlockDiagonalCausalMask,
    BlockDiagonalMask,
    LocalAttentionFromBottomRightMask,
    LowerTriangularFromBottomRightLocalAttentionMask,
    LowerTriangularFromBottomRightMask,
    LowerTriangularMask,
    LowerTriangularMaskWithTensorBias,
    _SeqLenInfo,
)

__all__ = [
    "AttentionBias",
    "BlockDiagonalCausalFromBottomRightMask",
    "BlockDiagonalCausalLocalAttentionFromBottomRightMask",
    "BlockDiagonalCausalLocalAttentionMask",
    "BlockDiagonalCausalMask",
    "BlockDiagonalMask",
    "LocalAttentionFromBottomRightMask",
    "LowerTriangularFromBottomRightLocalAttentionMask",
    "LowerTriangularFromBottomRightMask",
    "LowerTriangularMask",
    "LowerTriangularMaskWithTensorBias",
    "_SeqLenInfo",
]
