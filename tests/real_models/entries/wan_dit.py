"""Wan2.1's video DiT (`wan/modules/model.py`: WanModel), shrunk: 2 layers, width 64, 4 heads;
a 4x3x8x8 latent (48 tokens, padded to a sequence of 56 as generate.py pads to `seq_len`) and a
12-token text embedding. Its attention is flash-attn's varlen over the tokens' lengths (FA3
where it imports, else FA2), in bfloat16, after `assert q.device.type == 'cuda'`. The tree:
`wan/` (Wan-Video/Wan2.1 at 9737cba9c1c3) with this file beside it and diffusers 0.31 on the
path; `wan/__init__.py` pulls in the whole pipeline (T5, CLIP, the VAE), so only the DiT's
modules package is loaded, by path."""

import sys
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent
for name, folder in (("wan", ROOT / "wan"), ("wan.modules", ROOT / "wan" / "modules")):
    package = types.ModuleType(name)
    package.__path__ = [str(folder)]
    sys.modules[name] = package

from wan.modules.model import WanModel  # noqa: E402


def build():
    torch.manual_seed(0)
    model = WanModel(
        model_type="t2v",
        patch_size=(1, 2, 2),
        text_len=16,
        in_dim=4,
        dim=64,
        ffn_dim=128,
        freq_dim=32,
        text_dim=32,
        out_dim=4,
        num_heads=4,
        num_layers=2,
    )
    with torch.no_grad():  # what starts at zero (the modulations, the head) perturbed; norms stay near 1
        for weight in model.parameters():
            weight.add_(torch.randn_like(weight), alpha=0.05)
    g = torch.Generator().manual_seed(1)
    latent = torch.randn(4, 3, 8, 8, generator=g)
    text = torch.randn(12, 32, generator=g)
    target = torch.randn(4, 3, 8, 8, generator=g)
    inputs = {"x": [latent], "t": torch.tensor([500.0]), "context": [text], "seq_len": 56}

    def loss_fn(output):
        return torch.nn.functional.mse_loss(output[0].float(), target.to(output[0].device))

    return model, inputs, loss_fn
