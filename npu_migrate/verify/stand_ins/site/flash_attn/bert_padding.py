"""flash-attn's bert_padding (npu_migrate.verify.stand_ins.padding)."""

from npu_migrate.verify.stand_ins.padding import (
    index_first_axis,
    index_put_first_axis,
    pad_input,
    unpad_input,
    unpad_input_for_concatenated_sequences,
)

__all__ = [
    "index_first_axis",
    "index_put_first_axis",
    "pad_input",
    "unpad_input",
    "unpad_input_for_concatenated_sequences",
]
