"""transformer_engine.pytorch.distributed (npu_migrate.verify.stand_ins.te): one rank."""

from npu_migrate.verify.stand_ins.te import CudaRNGStatesTracker, checkpoint

__all__ = ["CudaRNGStatesTracker", "checkpoint"]
