"""transformer_engine.pytorch (npu_migrate.verify.stand_ins.te)."""

from npu_migrate.verify.stand_ins.te import (
    DotProductAttention,
    GroupedLinear,
    LayerNorm,
    LayerNormLinear,
    LayerNormMLP,
    Linear,
    RMSNorm,
    fp8_autocast,
    fp8_model_init,
)

from . import distributed, tensor

__all__ = [
    "DotProductAttention",
    "GroupedLinear",
    "LayerNorm",
    "LayerNormLinear",
    "LayerNormMLP",
    "Linear",
    "RMSNorm",
    "distributed",
    "fp8_autocast",
    "fp8_model_init",
    "tensor",
]
