"""litgpt's GPT in a LLaMA configuration (RMSNorm, SwiGLU, grouped queries), trained a step."""

import torch
import torch.nn.functional as F
from litgpt.config import Config
from litgpt.model import GPT

VOCAB = 128


def build():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    config = Config(
        block_size=32,
        vocab_size=VOCAB,
        padded_vocab_size=VOCAB,
        n_layer=2,
        n_head=4,
        n_query_groups=2,
        n_embd=64,
        rotary_percentage=1.0,
        parallel_residual=False,
        bias=False,
        norm_class_name="RMSNorm",
        mlp_class_name="LLaMAMLP",
        intermediate_size=128,
    )
    model = GPT(config).to(device)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, VOCAB, (2, 16), generator=g).to(device)
    targets = torch.randint(0, VOCAB, (2, 16), generator=g).to(device)

    def loss_fn(logits):
        return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return {"model": model, "inputs": (idx,), "loss_fn": loss_fn, "optimizer": optimizer}
