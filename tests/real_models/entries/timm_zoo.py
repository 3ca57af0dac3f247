"""A zoo of timm 1.0.15 vision transformers, each at its smallest: CaiT (class attention), ConViT
(gated positional self-attention), Swin (windows with a shifted-window mask), Twins (spatially
reduced keys), BEiT (with a relative position bias, and without one: then its SDPA gets no mask)
and Visformer, trained three steps on one batch. timm writes attention both ways (`if
self.fused_attn:` SDPA, else eager): run it again with TIMM_FUSED_ATTN=0 for the eager branches.
SGD, not Adam: a bias feeding BatchNorm (Visformer's) has a zero gradient in exact arithmetic,
Adam normalises its rounding noise into full steps, and BatchNorm's running mean follows them, a
difference no migration explains."""

import timm
import torch
import torch.nn.functional as F

CLASSES = 10
MODELS = {
    "cait": ("cait_xxs24_224", dict(patch_size=8, embed_dim=32, depth=2, num_heads=2, depth_token_only=1)),
    "convit": ("convit_tiny", dict(patch_size=8, embed_dim=32, depth=2, num_heads=2, local_up_to_layer=1)),
    "swin": ("swin_tiny_patch4_window7_224",
             dict(patch_size=2, window_size=4, embed_dim=16, depths=(1, 1), num_heads=(2, 2))),
    "twins": ("twins_pcpvt_small",
              dict(embed_dims=(16, 32), depths=(1, 1), num_heads=(1, 2), mlp_ratios=(2, 2),
                   sr_ratios=(2, 1))),
    "beit": ("beit_base_patch16_224", dict(patch_size=8, embed_dim=32, depth=2, num_heads=2)),
    "beit_abs": ("beit_base_patch16_224",  # no relative position bias: SDPA gets no mask
                 dict(patch_size=8, embed_dim=32, depth=2, num_heads=2, use_abs_pos_emb=True,
                      use_rel_pos_bias=False)),
    "visformer": ("visformer_tiny", dict(init_channels=8, embed_dim=32, depth=(1, 1, 1), num_heads=2)),
}  # fmt: skip


class Zoo(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.models = torch.nn.ModuleDict(
            {
                key: timm.create_model(name, img_size=32, num_classes=CLASSES, **size)
                for key, (name, size) in MODELS.items()
            }
        )

    def forward(self, images):
        return {key: model(images) for key, model in self.models.items()}


def build():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = Zoo().to(device)
    g = torch.Generator().manual_seed(1)
    images = torch.randn(8, 3, 32, 32, generator=g).to(device)
    labels = torch.randint(0, CLASSES, (8,), generator=g).to(device)

    def loss_fn(output):
        return sum(F.cross_entropy(logits, labels) for logits in output.values())

    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return {"model": model, "inputs": (images,), "loss_fn": loss_fn, "optimizer": optimizer}
