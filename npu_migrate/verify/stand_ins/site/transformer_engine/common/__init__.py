"""transformer_engine.common (npu_migrate.verify.stand_ins.te)."""

from . import recipe

__all__ = ["recipe"]
