"""flash-attn's layers (npu_migrate.verify.stand_ins)."""
