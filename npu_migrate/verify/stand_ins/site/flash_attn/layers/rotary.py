"""flash-attn's rotary embedding (npu_migrate.verify.stand_ins.rotary)."""

from npu_migrate.verify.stand_ins.rotary import apply_rotary_emb, apply_rotary_emb_func

__all__ = ["apply_rotary_emb", "apply_rotary_emb_func"]
