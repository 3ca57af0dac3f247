"""DiT (diffusers' DiTTransformer2DModel): patch embedding, adaLN-Zero blocks, class labels."""

import torch
from diffusers.models import DiTTransformer2DModel


def build():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = DiTTransformer2DModel(
        num_attention_heads=2,
        attention_head_dim=16,
        in_channels=4,
        out_channels=8,
        num_layers=2,
        sample_size=8,
        patch_size=2,
        num_embeds_ada_norm=10,
    )
    for weight in model.parameters():  # adaLN-Zero starts at zero: perturbed, so outputs prove something
        torch.nn.init.normal_(weight, std=0.02)
    g = torch.Generator().manual_seed(1)
    inputs = {
        "hidden_states": torch.randn(2, 4, 8, 8, generator=g).to(device),
        "timestep": torch.tensor([3, 7]).to(device),
        "class_labels": torch.tensor([1, 5]).to(device),
    }
    return model.to(device).eval(), inputs
