"""transformer_engine.pytorch.tensor (npu_migrate.verify.stand_ins.te): FP8 tensor types."""

from npu_migrate.verify.stand_ins.te import QuantizedTensor

from . import float8_tensor, utils

__all__ = ["QuantizedTensor", "float8_tensor", "utils"]
