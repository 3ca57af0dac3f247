"""x-transformers' TransformerWrapper around a rotary Decoder, trained for a step or two."""

import torch
import torch.nn.functional as F
from x_transformers import Decoder, TransformerWrapper

VOCAB = 64


def build():
    torch.manual_seed(0)
    layers = Decoder(dim=32, depth=2, heads=4, rotary_pos_emb=True, attn_flash=True)
    model = TransformerWrapper(num_tokens=VOCAB, max_seq_len=32, attn_layers=layers).eval()
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, VOCAB, (2, 16), generator=g)
    targets = torch.randint(0, VOCAB, (2, 16), generator=g)

    def loss_fn(logits):
        return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return {"model": model, "inputs": (idx,), "loss_fn": loss_fn, "optimizer": optimizer}
