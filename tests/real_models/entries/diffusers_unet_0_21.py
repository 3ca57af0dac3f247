"""Stable Diffusion's UNet as diffusers 0.21 builds it for its text-to-image pipeline and
training script: down and up blocks with self- and cross-attention through AttnProcessor2_0
(scaled_dot_product_attention, no mask), trained three steps on the noise-prediction loss."""

import torch
import torch.nn.functional as F
from diffusers.models.unet_2d_condition import UNet2DConditionModel


def build():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        block_out_channels=(32, 64),
        layers_per_block=1,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32,
        attention_head_dim=8,
        norm_num_groups=16,
    )
    g = torch.Generator().manual_seed(1)
    noise = torch.randn(2, 4, 8, 8, generator=g).to(device)
    inputs = {
        "sample": torch.randn(2, 4, 8, 8, generator=g).to(device),
        "timestep": torch.tensor([10, 500]).to(device),
        "encoder_hidden_states": torch.randn(2, 7, 32, generator=g).to(device),
    }

    def loss_fn(output):
        return F.mse_loss(output.sample, noise)

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return {"model": model.to(device), "inputs": inputs, "loss_fn": loss_fn, "optimizer": optimizer}
