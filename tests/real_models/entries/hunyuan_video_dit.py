"""HunyuanVideo's video DiT (`hyvideo/modules/models.py`: HYVideoDiffusionTransformer), shrunk:
width 64, 4 heads, one dual-stream and one single-stream block, a two-block token refiner; a
1x2x8x8 latent (32 tokens) and two 8-token prompts, the first with 3 padding tokens, as
sample_video.py feeds it (3-D rotary tables from `get_nd_rotary_pos_embed`). Its attention is
flash-attn's varlen over text-length `cu_seqlens` that `get_cu_seqlens` builds on "cuda". The
tree: `hyvideo/` (Tencent-Hunyuan/HunyuanVideo at fa14b001c18f) and `diffusers/` (0.31) with
this file beside it; `hyvideo/__init__.py` pulls in the whole pipeline, so only its modules
package is loaded, by path."""

import sys
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent
for name, folder in (("hyvideo", ROOT / "hyvideo"),):
    package = types.ModuleType(name)
    package.__path__ = [str(folder)]
    sys.modules[name] = package

from hyvideo.modules.models import HYVideoDiffusionTransformer  # noqa: E402
from hyvideo.modules.posemb_layers import get_nd_rotary_pos_embed  # noqa: E402


class Autocast(torch.nn.Module):
    """The transformer under bfloat16 autocast on whatever device it is on, as the pipeline calls it."""

    def __init__(self, transformer):
        super().__init__()
        self.transformer = transformer

    def forward(self, **inputs):
        with torch.autocast(device_type=inputs["x"].device.type, dtype=torch.bfloat16):
            return self.transformer(**inputs)


def build():
    torch.manual_seed(0)
    args = types.SimpleNamespace(text_states_dim=32, text_states_dim_2=16)
    model = HYVideoDiffusionTransformer(
        args,
        patch_size=[1, 2, 2],
        in_channels=4,
        hidden_size=64,
        heads_num=4,
        mlp_width_ratio=2.0,
        mm_double_blocks_depth=1,
        mm_single_blocks_depth=1,
        rope_dim_list=[4, 6, 6],
    )
    with torch.no_grad():  # what starts at zero (the modulations, the head) perturbed; norms stay near 1
        for weight in model.parameters():
            weight.add_(torch.randn_like(weight), alpha=0.05)
    g = torch.Generator().manual_seed(1)
    freqs_cos, freqs_sin = get_nd_rotary_pos_embed([4, 6, 6], [1, 4, 4], theta=256, use_real=True)
    inputs = {
        "x": torch.randn(2, 4, 1, 8, 8, generator=g),
        "t": torch.tensor([300.0, 800.0]),
        "text_states": torch.randn(2, 8, 32, generator=g),
        "text_mask": torch.tensor([[1] * 5 + [0] * 3, [1] * 8]),
        "text_states_2": torch.randn(2, 16, generator=g),
        "freqs_cos": freqs_cos,
        "freqs_sin": freqs_sin,
        "return_dict": False,
    }
    target = torch.randn(2, 4, 1, 8, 8, generator=g)

    def loss_fn(output):
        return torch.nn.functional.mse_loss(output.float(), target.to(output.device))

    return Autocast(model), inputs, loss_fn
