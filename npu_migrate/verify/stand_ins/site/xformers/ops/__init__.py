"""xformers.ops: memory-efficient attention and its biases (npu_migrate.verify.stand_ins)."""

from npu_migrate.verify.stand_ins.xformers_bias import AttentionBias, BlockDiagonalMask, LowerTriangularMask
from npu_migrate.verify.stand_ins.xformers_ops import (
    memory_efficient_attention,
    memory_efficient_attention_forward,
    unbind,
)

from . import fmha

# the kernels one may name as `op=`: the stand-in computes the same attention for each
MemoryEfficientAttentionFlashAttentionOp = ("flash", "flash")
MemoryEfficientAttentionCutlassOp = ("cutlass", "cutlass")
MemoryEfficientAttentionCutlassFwdFlashBwOp = ("cutlass", "flash")

__all__ = [
    "AttentionBias",
    "BlockDiagonalMask",
    "LowerTriangularMask",
    "MemoryEfficientAttentionCutlassFwdFlashBwOp",
    "MemoryEfficientAttentionCutlassOp",
    "MemoryEfficientAttentionFlashAttentionOp",
    "fmha",
    "memory_efficient_attention",
    "memory_efficient_attention_forward",
    "unbind",
]
