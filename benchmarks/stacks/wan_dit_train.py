"""Wan2.1's video DiT (`wan/modules/model.py`) trained for a few steps on CUDA, written as a
user of the repository would: the model as generate.py builds it, shrunk (2 layers, width 64),
a flow-matching step on a random latent video and text embedding, bf16 autocast as Wan runs.
Prints one `step N loss X` line per step. `wan/__init__.py` imports the whole pipeline (T5,
CLIP, torchvision); only the DiT's modules are loaded here, by path."""

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


def main(steps: int = 4) -> None:
    torch.manual_seed(0)
    device = torch.device("cuda")
    model = WanModel(
        model_type="t2v", patch_size=(1, 2, 2), text_len=16, in_dim=4, dim=64, ffn_dim=128,
        freq_dim=32, text_dim=32, out_dim=4, num_heads=4, num_layers=2,
    ).to(device)  # fmt: skip
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    latent = torch.randn(4, 3, 8, 8, device=device)  # (C, F, H, W): 3 * 4 * 4 = 48 tokens
    text = torch.randn(12, 32, device=device)
    seq_len = 3 * 4 * 4
    for step in range(steps):
        noise = torch.randn_like(latent)
        t = torch.full((1,), 500.0, device=device)
        noisy = 0.5 * latent + 0.5 * noise
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            (prediction,) = model([noisy], t=t, context=[text], seq_len=seq_len)
        loss = torch.nn.functional.mse_loss(prediction.float(), noise - latent)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
