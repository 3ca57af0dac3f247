"""megatron-core 0.12.1's GPT layers as Megatron-LM trains a LLaMA-style model with its local
spec (no Transformer Engine): 2 layers, width 64, 4 heads, RoPE, RMSNorm (torch's, what the
local spec builds for `--normalization RMSNorm`), SwiGLU through Megatron's `bias_swiglu_impl`,
core attention written as `baddbmm`, the fused scale-mask-softmax module and `bmm` in Megatron's
[s, b, n, d] layout, and the masked-softmax fusion on as its training turns it on. One process,
tensor and pipeline parallel size 1 over a gloo group of one. The tree: `megatron/` (the
megatron_core 0.12.1 sdist) with this file beside it."""

import os
import tempfile

import torch
import torch.nn.functional as F
from megatron.core import parallel_state, tensor_parallel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.transformer.transformer_config import TransformerConfig

VOCAB, SEQ, BATCH = 128, 32, 2


def initialize_model_parallel():
    """A process group of one, as `torchrun --nproc_per_node 1` would give Megatron, and its
    inference RNG tracker: dropout is off in verify, and the training tracker's CUDA generator
    states have no meaning on the original side, which runs on the CPU."""
    if not torch.distributed.is_initialized():
        rendezvous = os.path.join(tempfile.mkdtemp(prefix="megatron-gpt-"), "rendezvous")
        torch.distributed.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=0, world_size=1)
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(1, 1)
    tensor_parallel.get_cuda_rng_tracker(inference_rng_tracker=True)


def build():
    initialize_model_parallel()
    torch.manual_seed(0)
    config = TransformerConfig(
        num_layers=2,
        hidden_size=64,
        ffn_hidden_size=128,
        num_attention_heads=4,
        normalization="RMSNorm",
        gated_linear_unit=True,
        activation_func=F.silu,
        bias_activation_fusion=True,
        add_bias_linear=False,
        masked_softmax_fusion=True,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        use_cpu_initialization=True,
    )
    model = GPTModel(
        config=config,
        transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"),
        vocab_size=VOCAB,
        max_sequence_length=SEQ,
        position_embedding_type="rope",
    )
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
    position_ids = torch.arange(SEQ).unsqueeze(0).expand(BATCH, SEQ)
    causal = torch.tril(torch.ones(1, 1, SEQ, SEQ)) < 0.5  # True where a token may not look
    inputs = {"input_ids": tokens[:, :-1], "position_ids": position_ids, "attention_mask": causal}
    labels = tokens[:, 1:]

    def loss_fn(logits):
        return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten().to(logits.device))

    return model, inputs, loss_fn
