"""apex.normalization (npu_migrate.verify.stand_ins.norms)."""

from npu_migrate.verify.stand_ins.norms import (
    FusedLayerNorm,
    FusedRMSNorm,
    MixedFusedLayerNorm,
    MixedFusedRMSNorm,
)

__all__ = ["FusedLayerNorm", "FusedRMSNorm", "MixedFusedLayerNorm", "MixedFusedRMSNorm"]
