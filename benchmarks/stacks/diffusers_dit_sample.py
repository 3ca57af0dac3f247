"""diffusers' DiT (`DiTTransformer2DModel`, shrunk) sampled three steps under no_grad, as a user
of a class-conditional DiT pipeline would: a control for the forecast (nothing to report)."""

import torch
import torch_npu  # noqa: F401
from diffusers import DiTTransformer2DModel


def main() -> None:
    model = DiTTransformer2DModel(
        num_attention_heads=2, attention_head_dim=16, in_channels=4, num_layers=2, sample_size=8,
        patch_size=2, num_embeds_ada_norm=10,
    ).npu().eval()  # fmt: skip
    latents = torch.randn(2, 4, 8, 8).npu()
    with torch.no_grad():
        for t in (999, 500, 1):
            timestep, labels = torch.tensor([t, t]).npu(), torch.tensor([1, 2]).npu()
            out = model(latents, timestep=timestep, class_labels=labels).sample
            latents = latents - 0.1 * out[:, :4]
    print(tuple(latents.shape))


if __name__ == "__main__":
    main()
