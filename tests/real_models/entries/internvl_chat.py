"""InternVL chat (OpenGVLab/InternVL's own `internvl_chat/internvl` package): an InternViT vision
encoder (RMSNorm, q/k RMS normalization, layer scale) whose patch features are pixel-shuffled 2x2
and projected by `mlp1` into an InternLM2 decoder (fused `wqkv` with grouped key/value heads,
rotary tables, an additive causal + padding mask, RMSNorm, SwiGLU). Two prompts of one 56x56
image each: 16 patches, 4 image-context tokens per image, which `InternVLChatModel.forward`
writes over the prompt's `<IMG_CONTEXT>` embeddings; the second prompt is right-padded. The loss
is the model's own (cross entropy over `labels`, -100 on the image and padding tokens); three
AdamW steps. `build()` takes the model's eager paths (the vision `_naive_attn`, InternLM2's
`InternLM2Attention`), as the code does on its own when no flash_attn imports; `build_flash()`
its flash-attn paths, in bfloat16, as InternVL runs them (verify's original side imports
flash-attn's stand-in where it runs without CUDA). The tree: `internvl/` (the repository's
`internvl_chat/internvl` at commit
2410d1dbf208f0e799459aff9376e5747dbf41a2) with this file beside it; it needs transformers 4.46,
timm, einops and peft (`modeling_internvl_chat` imports `peft` for its LoRA wrappers)."""

import torch
from internvl.model.internvl_chat import InternVLChatConfig, InternVLChatModel

VOCAB = 128
IMG_START, IMG_CONTEXT, IMG_END, PAD = 120, 121, 122, 0
IMAGE, PATCH = 56, 14  # a 4x4 patch grid, pixel-shuffled (downsample 0.5) into 4 tokens
IMAGE_TOKENS = (IMAGE // PATCH) ** 2 // 4


def make_config():
    vision = {
        "architectures": ["InternVisionModel"],
        "image_size": IMAGE,
        "patch_size": PATCH,
        "hidden_size": 32,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "qk_normalization": True,
        "norm_type": "rms_norm",
        "use_flash_attn": False,
    }
    llm = {
        "architectures": ["InternLM2ForCausalLM"],
        "vocab_size": VOCAB,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 64,
        "bias": False,
        "use_cache": False,
        "pad_token_id": PAD,
        "attn_implementation": "eager",
    }
    return InternVLChatConfig(
        vision_config=vision,
        llm_config=llm,
        template="internlm2-chat",
        downsample_ratio=0.5,
        ps_version="v2",
        select_layer=-1,
    )


def build(flash=False):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = InternVLChatModel(make_config(), use_flash_attn=flash)
    model.img_context_token_id = IMG_CONTEXT
    dtype = torch.bfloat16 if flash else torch.float32
    model = model.to(device, dtype).eval()

    g = torch.Generator().manual_seed(1)
    text = torch.randint(1, 100, (2, 9), generator=g)
    image = torch.tensor([[IMG_START] + [IMG_CONTEXT] * IMAGE_TOKENS + [IMG_END]] * 2)
    ids = torch.cat([text[:, :3], image, text[:, 3:]], 1)  # (2, 15)
    mask = torch.ones_like(ids)
    ids[1, -2:], mask[1, -2:] = PAD, 0  # the second prompt is two tokens shorter
    labels = ids.masked_fill((ids == IMG_CONTEXT) | (mask == 0), -100)
    inputs = {
        "pixel_values": torch.randn(2, 3, IMAGE, IMAGE, generator=g).to(device, dtype),
        "input_ids": ids.to(device),
        "attention_mask": mask.to(device),
        "image_flags": torch.ones(2, 1, dtype=torch.long).to(device),
        "labels": labels.to(device),
    }

    def loss_fn(output):
        return output.loss

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return {"model": model, "inputs": inputs, "loss_fn": loss_fn, "optimizer": optimizer}


def build_flash():
    """The model as InternVL runs it (`use_flash_attn=True`, bfloat16): InternViT's flash-attn
    varlen attention and InternLM2's flash-attention-2 class, on flash-attn's stand-ins where
    the original runs without CUDA."""
    return build(flash=True)
