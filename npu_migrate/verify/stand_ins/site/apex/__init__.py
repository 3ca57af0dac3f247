"""npu-migrate's plain-torch stand-in for apex (npu_migrate.verify.stand_ins)."""

from . import normalization, optimizers

__all__ = ["normalization", "optimizers"]
