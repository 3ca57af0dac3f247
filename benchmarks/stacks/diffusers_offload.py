"""A diffusers pipeline run with CPU offload, as HunyuanVideo's `--use-cpu-offload` runs its own:
the weights stay on the host and each model goes to the accelerator for its forward
(accelerate's hooks; the sequential, layer-by-layer form stops on this tiny UNet with accelerate
1.6 even on the CPU, "Cannot copy out of meta tensor", so the model-level form runs). A tiny DDPM
UNet built from its config, three denoising steps from a fixed seed; the same run without
offload on the CPU first, as the reference. Prints `max difference to the CPU run: X`."""

import torch
from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel


def main() -> None:
    torch.manual_seed(0)
    unet = UNet2DModel(
        sample_size=16, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(32, 64),
        down_block_types=("DownBlock2D", "AttnDownBlock2D"), up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        norm_num_groups=8,
    )  # fmt: skip
    pipeline = DDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=10))
    steps = {"num_inference_steps": 3, "output_type": "np"}
    reference = pipeline(generator=torch.Generator().manual_seed(0), **steps).images
    pipeline.enable_model_cpu_offload()
    offloaded = pipeline(generator=torch.Generator().manual_seed(0), **steps).images
    print(f"offloaded to {pipeline._execution_device.type}")
    print(f"max difference to the CPU run: {abs(offloaded - reference).max():.2e}")


if __name__ == "__main__":
    main()
