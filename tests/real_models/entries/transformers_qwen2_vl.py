"""Qwen2-VL (transformers 4.46), a multimodal LLM: a vision transformer with 2-D RoPE over
image patches, merged into a Qwen2 decoder with multimodal RoPE (mrope) and RMSNorm; one image
in the prompt, trained three steps. QWEN2_VL_VISION_ATTN=flash_attention_2 runs the vision
blocks' VisionFlashAttention2 instead (`flash_attn_varlen_func` over the image's cumulative
sequence ends), the class a CUDA user runs and the one whose call `apply --unsafe` swaps. flash_attn
is CUDA-only, so where the module found none (it binds the name to None) a reference of the
function's documented semantics stands in: attention within each sequence, scaled by
1/sqrt(head dim). The migrated module no longer calls it."""

import os

import torch
import torch.nn.functional as F
from transformers.models.qwen2_vl import modeling_qwen2_vl
from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLConfig
from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLForConditionalGeneration

VOCAB, IMAGE, VISION_START, VISION_END, VIDEO = 128, 120, 121, 122, 123
GRID = (1, 4, 4)  # frames, patch rows, patch columns: 16 patches, merged 2x2 into 4 image tokens
PATCH = 3 * 2 * 14 * 14  # channels x temporal patch x patch x patch


def varlen_reference(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
):
    """flash_attn_varlen_func's result for (tokens, heads, head dim) q/k/v packed by cumulative
    sequence ends: each sequence attends within itself."""
    assert dropout_p == 0.0 and not causal  # what VisionFlashAttention2 asks for
    out = torch.empty_like(q)
    q_ends, k_ends = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for q0, q1, k0, k1 in zip(q_ends[:-1], q_ends[1:], k_ends[:-1], k_ends[1:], strict=True):
        heads_first = [t.transpose(0, 1) for t in (q[q0:q1], k[k0:k1], v[k0:k1])]
        out[q0:q1] = F.scaled_dot_product_attention(*heads_first, scale=softmax_scale).transpose(0, 1)
    return out


def use_flash_vision_attention(model):
    """Each vision block's attention as VisionFlashAttention2, with the same weights."""
    if modeling_qwen2_vl.flash_attn_varlen_func is None:
        modeling_qwen2_vl.flash_attn_varlen_func = varlen_reference
    for block in model.visual.blocks:
        flash = modeling_qwen2_vl.VisionFlashAttention2(block.attn.qkv.in_features, block.attn.num_heads)
        flash.load_state_dict(block.attn.state_dict())
        block.attn = flash.to(block.attn.qkv.weight.device)


def build():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    config = Qwen2VLConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]},
        vision_config={"depth": 2, "embed_dim": 32, "hidden_size": 64, "num_heads": 2, "mlp_ratio": 2},
        image_token_id=IMAGE,
        video_token_id=VIDEO,
        vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END,
        attn_implementation="eager",
    )
    model = Qwen2VLForConditionalGeneration(config).to(device)
    if os.environ.get("QWEN2_VL_VISION_ATTN") == "flash_attention_2":
        use_flash_vision_attention(model)
    g = torch.Generator().manual_seed(1)
    text = torch.randint(0, 100, (1, 10), generator=g)
    image = torch.tensor([[VISION_START] + [IMAGE] * 4 + [VISION_END]])
    ids = torch.cat([text[:, :3], image, text[:, 3:]], 1)
    inputs = {
        "input_ids": ids.to(device),
        "pixel_values": torch.randn(16, PATCH, generator=g).to(device),
        "image_grid_thw": torch.tensor([GRID]).to(device),
    }

    def loss_fn(output):
        logits = output.logits[:, :-1].reshape(-1, VOCAB)
        return F.cross_entropy(logits, inputs["input_ids"][:, 1:].reshape(-1))

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return {"model": model, "inputs": inputs, "loss_fn": loss_fn, "optimizer": optimizer}
