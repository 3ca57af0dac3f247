"""Hugging Face LLaMA: before SDPA (transformers 4.30), eager attention over statements, RoPE by
rotate_half, LlamaRMSNorm; of the SDPA era (4.46) with LLAMA_ATTN=sdpa, SDPA with `is_causal`
decided at run time (no padding mask given). Its fused swaps trained three steps."""

import os

import torch
import torch.nn.functional as F
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaForCausalLM

VOCAB = 128


def build():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
        **({"attn_implementation": os.environ["LLAMA_ATTN"]} if "LLAMA_ATTN" in os.environ else {}),
    )
    model = LlamaForCausalLM(config).to(device)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (2, 16), generator=g).to(device)

    def loss_fn(output):
        return F.cross_entropy(output.logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return {"model": model, "inputs": {"input_ids": ids}, "loss_fn": loss_fn, "optimizer": optimizer}
