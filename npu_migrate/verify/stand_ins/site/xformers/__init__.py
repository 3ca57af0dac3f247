"""npu-migrate's plain-torch stand-in for xformers (npu_migrate.verify.stand_ins)."""

from npu_migrate.verify.stand_ins import versions

__version__ = versions.of("xformers")
