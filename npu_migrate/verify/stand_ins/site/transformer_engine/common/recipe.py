"""transformer_engine.common.recipe: FP8 recipes are kept, never applied."""

from npu_migrate.verify.stand_ins.te import DelayedScaling, Format

__all__ = ["DelayedScaling", "Format"]
