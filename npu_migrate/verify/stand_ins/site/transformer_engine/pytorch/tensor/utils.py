"""transformer_engine.pytorch.tensor.utils (npu_migrate.verify.stand_ins.te): FP8 only."""

from npu_migrate.verify.stand_ins.te import cast_master_weights_to_fp8, replace_raw_data

__all__ = ["cast_master_weights_to_fp8", "replace_raw_data"]
