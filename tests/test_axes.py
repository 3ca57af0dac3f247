"""Which axis the code puts last (engine.axes), in the forms real attention code takes: what a
fused attention operator's head-dim guard may rely on, and what it must not."""

from __future__ import annotations

import libcst as cst
import pytest

from npu_migrate.engine.axes import Axes, head_dim_held
from npu_migrate.engine.patterns import code_of
from npu_migrate.engine.ranks import Ranks, spelled_sizes

FORWARD = """
def forward(self, x, given):
    B, N, C = x.shape
    # timm's Attention: (3, B, H, N, D), then unbound
    qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
    q, k, v = qkv.unbind(0)
    first = qkv[0]
    dq, dk, dv = qkv[0], qkv[1], qkv[2]  # DINO's
    # diffusers' processors: view, then heads before tokens
    hf = self.to_q(x).view(B, -1, self.heads, self.head_dim).transpose(1, 2).contiguous()
    scaled = hf * 0.125
    # timm's XCiT: the tokens permuted last, then normalised
    xq, xk, xv = self.qkv(x).reshape(B, N, 3, self.num_heads, -1).permute(2, 0, 3, 4, 1).unbind(0)
    xn = torch.nn.functional.normalize(xq, dim=-1)
    swapped = hf.transpose(-2, -1)
    wide = x.view(B, N, 2, 1024).transpose(1, 2)
    direct = x.view(B, 4, N, 16)  # already (B, H, S, D)
    # timm's Visformer: channels first, the head dim before the tokens, permuted last
    vq, vk, vv = self.qkv(x).reshape(B, 3, self.num_heads, self.head_dim, -1).permute(1, 0, 2, 4, 3).unbind(0)
    passed = given
    either = hf
    if self.flip:
        either = swapped
    out = q
"""


def _shapes() -> tuple[Axes, cst.Module]:
    module = cst.parse_module(FORWARD)
    function = module.body[0]
    assert isinstance(function, cst.FunctionDef) and isinstance(function.body, cst.IndentedBlock)
    return Axes(Ranks(function, function.body.body[-1])), module


@pytest.mark.parametrize(
    ("name", "last", "position"),
    [
        ("q", "C // self.num_heads", (4, 5)),  # permute(2, 0, 3, 1, 4) keeps the head split last
        ("first", "C // self.num_heads", (4, 5)),  # qkv[0]
        ("dk", "C // self.num_heads", (4, 5)),  # a tuple's element
        ("hf", "self.head_dim", (3, 4)),  # transpose(1, 2) leaves the last axis alone
        ("scaled", "self.head_dim", (3, 4)),  # times a number
        ("xn", "N", (1, 5)),  # XCiT: the tokens, through normalize
        ("swapped", "-1", (1, 4)),  # transpose(-2, -1) moves the tokens last
        ("wide", "1024", (3, 4)),
        ("vq", "self.head_dim", (3, 5)),
    ],
)
def test_the_last_axis_is_traced_to_the_size_that_spelled_it(
    name: str, last: str, position: tuple[int, int]
) -> None:
    axes, module = _shapes()
    shape = axes.of(cst.Name(name))
    assert shape is not None
    assert code_of(shape[-1].size, module) == last
    assert shape[-1].position == position[0] and len(spelled_sizes(shape[-1].made_by) or []) == position[1]


@pytest.mark.parametrize("name", ["passed", "either", "x"])
def test_an_axis_not_shown_is_unknown(name: str) -> None:
    """A parameter, and a name bound in a branch to another shape."""
    axes, _ = _shapes()
    assert axes.of(cst.Name(name)) is None


def test_the_guard_holds_channel_attention_and_a_head_dim_over_the_limit_only() -> None:
    """Visformer spells the head dim before the tokens and a direct view spells (B, H, S, D):
    neither is held."""
    axes, module = _shapes()
    held = {
        name: head_dim_held(axes.ranks, ["q"], {"q": cst.Name(name)}, module)
        for name in ("q", "hf", "vq", "direct", "xn", "swapped", "wide", "passed")
    }
    assert [n for n in ("q", "hf", "vq", "direct", "passed") if held[n] is not None] == []
    assert held["xn"] is not None and "puts `N` last, a size spelled before the head count" in held["xn"].why
    assert held["swapped"] is not None and "puts `-1` last" in held["swapped"].why
    assert held["wide"] is not None and "head dim is 1024, over the fused operator's 768" in held["wide"].why
