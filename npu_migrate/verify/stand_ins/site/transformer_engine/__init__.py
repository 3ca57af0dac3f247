"""npu-migrate's plain-torch stand-in for Transformer Engine (npu_migrate.verify.stand_ins.te)."""

from npu_migrate.verify.stand_ins import versions

from . import common, pytorch

__version__ = versions.of("transformer_engine")
__all__ = ["common", "pytorch"]
