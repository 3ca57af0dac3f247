"""apex.optimizers (npu_migrate.verify.stand_ins.optimizers)."""

from npu_migrate.verify.stand_ins.optimizers import FusedAdam, FusedLAMB, FusedSGD

__all__ = ["FusedAdam", "FusedLAMB", "FusedSGD"]
