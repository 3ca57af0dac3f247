"""Meta's Llama 3 reference model (llama-models), tiny, with grouped-query attention; its
fairscale layers need a (one-process) model-parallel group."""

import tempfile

import fairscale.nn.model_parallel.initialize as fs_init
import torch
import torch.distributed as dist
from llama_models.llama3.args import ModelArgs
from llama_models.llama3.model import Transformer


def build():
    if not dist.is_initialized():
        rendezvous = f"file://{tempfile.mkdtemp()}/rendezvous"
        dist.init_process_group("gloo", init_method=rendezvous, rank=0, world_size=1)
        fs_init.initialize_model_parallel(1)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    args = ModelArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=128, multiple_of=32)
    args.max_batch_size, args.max_seq_len = 2, 32  # the KV cache's size
    model = Transformer(args)
    for weight in model.parameters():  # the parallel layers leave their weights uninitialised
        torch.nn.init.normal_(weight, std=0.02)
    tokens = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(1))
    return model.to(device).eval(), (tokens.to(device), 0)
