"""transformer_engine.pytorch.tensor.float8_tensor (npu_migrate.verify.stand_ins.te)."""

from npu_migrate.verify.stand_ins.te import Float8Tensor

__all__ = ["Float8Tensor"]
