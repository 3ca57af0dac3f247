"""Open-Sora Plan v1.3 (PKU-YuanGroup/Open-Sora-Plan @ f7fa604f), its own model code: the
text-to-video diffusion transformer OpenSoraT2V_v1_3 (patch embedding per frame, adaLN-single
timestep modulation, self-attention with 3-D RoPE over (frame, row, column), cross-attention to a
projected caption with a padding mask, a tanh-GELU feed-forward; block 2 runs the sparse 1-D
attention the 2B model uses in its middle blocks), on a latent video of 3 frames of 8x8, trained
three steps with a denoising loss (MSE against a target noise). `build_vae` is its causal video
VAE (CausalVAEModel: causal 3-D convolutions, a mid-block attention), tiny, with a
reconstruction loss.

The tree holds the repository's `opensora` package beside this file. Its model modules import
torch_npu as `try: import torch_npu; from opensora.npu_config import npu_config ... except:` (a
bare except). Where all of it imports, they take Open-Sora Plan's own Ascend path (NPUConfig:
deepspeed patched, the process pinned to CPU cores with taskset, attention through
npu_config.run_attention); where anything in it fails, they take the CUDA path, silently. Under
verify's NPU emulation torch_npu imports but torch_npu.contrib.transfer_to_npu does not, so
NPUConfig calls torch.cuda.current_device(), which raises on a host without CUDA: the migrated
copy runs the CUDA path.

Two stand-ins, so the CUDA code runs on a CPU:
- `opensora.utils.utils` (which the model's module imports only for `to_2tuple`) imports wandb
  at its top. wandb 0.16.3 (the repository's pin) does not import beside NumPy 2 (np.float_),
  0.17.9 not beside protobuf 7; where wandb does not import, an empty module stands in.
- The attention processor runs SDPA under `torch.backends.cuda.sdp_kernel(enable_math=False,
  enable_flash=False, enable_mem_efficient=True)`; a CPU has no memory-efficient kernel, so SDPA
  finds no backend. `sdp_kernel_math_allowed` keeps that choice and allows the math kernel too."""

import importlib.machinery
import sys
import types

import torch
import torch.nn.functional as F

try:
    import wandb  # noqa: F401
except Exception:  # an empty stand-in: opensora.utils.utils only imports it
    sys.modules.pop("wandb", None)
    stand_in = types.ModuleType("wandb")
    stand_in.__spec__ = importlib.machinery.ModuleSpec("wandb", None)  # diffusers calls find_spec("wandb")
    sys.modules["wandb"] = stand_in

from opensora.models.diffusion.opensora_v1_3.modeling_opensora import OpenSoraT2V_v1_3

_sdp_kernel = torch.backends.cuda.sdp_kernel


def sdp_kernel_math_allowed(
    enable_flash=True, enable_math=True, enable_mem_efficient=True, enable_cudnn=True
):
    """The attention processor asks for CUDA's memory-efficient kernel alone (math and flash
    off), which a CPU does not have: SDPA finds no backend there. This keeps its choice and
    allows the math kernel beside it, where a GPU that runs the memory-efficient kernel still
    picks that (the same function, up to rounding)."""
    del enable_math
    return _sdp_kernel(
        enable_flash=enable_flash,
        enable_math=True,
        enable_mem_efficient=enable_mem_efficient,
        enable_cudnn=enable_cudnn,
    )


torch.backends.cuda.sdp_kernel = sdp_kernel_math_allowed

BATCH, CHANNELS, FRAMES, SIZE = 2, 4, 3, 8
CAPTION_TOKENS, CAPTION_CHANNELS = 6, 32


def build():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    heads, head_dim = 2, 24  # RoPE3D splits the head dimension in three even parts
    model = OpenSoraT2V_v1_3(
        num_attention_heads=heads,
        attention_head_dim=head_dim,
        in_channels=CHANNELS,
        out_channels=CHANNELS,
        num_layers=3,
        cross_attention_dim=heads * head_dim,
        attention_bias=True,
        sample_size_h=SIZE,
        sample_size_w=SIZE,
        sample_size_t=FRAMES,
        patch_size=2,
        patch_size_t=1,
        activation_fn="gelu-approximate",
        norm_elementwise_affine=False,
        norm_eps=1e-6,
        caption_channels=CAPTION_CHANNELS,
        sparse1d=True,  # blocks 2..29 sparse, as the 2B model: here block 2
        sparse_n=4,
    )
    g = torch.Generator().manual_seed(1)
    video_mask = torch.ones(BATCH, FRAMES, SIZE, SIZE, dtype=torch.long)
    caption_mask = torch.ones(BATCH, 1, CAPTION_TOKENS, dtype=torch.long)
    caption_mask[1, :, -2:] = 0  # the second caption is padded by two tokens
    inputs = {
        "hidden_states": torch.randn(BATCH, CHANNELS, FRAMES, SIZE, SIZE, generator=g).to(device),
        "timestep": torch.randint(0, 1000, (BATCH,), generator=g).to(device),
        "encoder_hidden_states": torch.randn(BATCH, 1, CAPTION_TOKENS, CAPTION_CHANNELS, generator=g).to(
            device
        ),
        "attention_mask": video_mask.to(device),
        "encoder_attention_mask": caption_mask.to(device),
    }
    noise = torch.randn(BATCH, CHANNELS, FRAMES, SIZE, SIZE, generator=g).to(device)

    def loss_fn(output):
        return F.mse_loss(output.sample, noise)

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return {"model": model.to(device).eval(), "inputs": inputs, "loss_fn": loss_fn, "optimizer": optimizer}


def build_vae():
    """CausalVAEModel (Open-Sora Plan's causal video VAE): causal 3-D convolutions (the first
    frame padded by itself), ResnetBlock3D, a spatial and a temporal (TimeDownsampleRes2x /
    TimeUpsampleRes2x) 2x step, the mid block's AttnBlock3DFix; 5 frames of 16x16 to 3 latent
    frames of 8x8 and back. The posterior's mode, not a sample, so both sides decode the same."""
    from opensora.models.causalvideovae.model.vae.modeling_causalvae import CausalVAEModel

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = CausalVAEModel(
        hidden_size=32,  # GroupNorm's 32 groups
        z_channels=4,
        embed_dim=4,
        hidden_size_mult=(1, 2),
        num_res_blocks=1,
        resolution=16,
        encoder_attention="AttnBlock3DFix",
        decoder_attention="AttnBlock3DFix",
        encoder_resnet_blocks=("ResnetBlock3D", "ResnetBlock3D"),
        encoder_spatial_downsample=("SpatialDownsample2x", ""),
        encoder_temporal_downsample=("TimeDownsampleRes2x", ""),
        decoder_resnet_blocks=("ResnetBlock3D", "ResnetBlock3D"),
        decoder_spatial_upsample=("", "SpatialUpsample2x"),
        decoder_temporal_upsample=("", "TimeUpsampleRes2x"),
    )
    g = torch.Generator().manual_seed(1)
    video = torch.rand(1, 3, 5, 16, 16, generator=g).mul(2).sub(1).to(device)  # frames in [-1, 1]
    inputs = {"input": video, "sample_posterior": False}

    def loss_fn(output):
        reconstruction, posterior = output
        return F.mse_loss(reconstruction, video) + 1e-6 * posterior.kl().mean()

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return {"model": model.to(device).eval(), "inputs": inputs, "loss_fn": loss_fn, "optimizer": optimizer}
