"""transformer_engine.pytorch (npu_migrate.verify.stand_ins.te)."""

from npu_migrate.verify.stand_ins.te import (
    DotProductAttention,
    LayerNorm,
    LayerNormLinear,
    LayerNormMLP,
    Linear,
    RMSNorm,
    fp8_autocast,
    fp8_model_init,
)

__all__ = [
    "DotProductAttention",
    "LayerNorm",
    "LayerNormLinear",
    "LayerNormMLP",
    "Linear",
    "RMSNorm",
    "fp8_autocast",
    "fp8_model_init",
]
