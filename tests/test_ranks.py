"""Tensor ranks proven from a function's code (engine.ranks), in the forms real attention code
takes them: what a fused operator's layout guard may rely on, and what it must not."""

from __future__ import annotations

import libcst as cst
import pytest

from npu_migrate.engine.ranks import Ranks

FORWARD = """
def forward(self, x, mask, q_in):
    B, N, C = x.shape
    qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    a, b, c = qkv.unbind(0)
    h = rearrange(x, "b n (h d) -> b h n d", h=4)
    t = self.q(x).view(B, N, 4, 8).transpose(1, 2) * 2
    r = torch.cat([a[:, :, :1, :], rotate(a[:, :, 1:, :])], dim=2).type_as(v)
    s = torch.stack([a, b])
    g, u = t.chunk(2, dim=-1)
    if mask is not None:
        w = t.float()
    else:
        w = x
    z = t
    for z in range(3):
        pass
    n = self.norm(a)
    e = q_in[None]
    a = a.unsqueeze(1)
    attn = q @ k
"""


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("qkv", 5),  # permute(2, 0, 3, 1, 4)
        ("q", 4),  # qkv[0]
        ("v", 4),
        ("b", 4),  # qkv.unbind(0)
        ("h", 4),  # einops' output side
        ("t", 4),  # view(B, N, 4, 8), transposed, times a number
        ("r", 4),  # torch.cat: the parts' rank, whichever part shows it (timm's RoPE pool)
        ("s", 5),  # torch.stack: one more
        ("g", 4),  # a chunk keeps the rank
        ("a", 5),  # the last binding counts (unsqueeze), not the first
        ("w", None),  # bound in both branches, to different ranks
        ("z", None),  # a loop target last
        ("n", None),  # a module's output: not seen
        ("x", None),  # a parameter
        ("e", None),  # a parameter, indexed
    ],
)
def test_a_rank_is_proven_only_from_what_the_code_shows(name: str, rank: int | None) -> None:
    function = cst.parse_module(FORWARD).body[0]
    assert isinstance(function, cst.FunctionDef) and isinstance(function.body, cst.IndentedBlock)
    ranks = Ranks(function, function.body.body[-1])
    assert ranks.of(cst.Name(name)) == rank


def test_a_binding_reads_the_bindings_before_it() -> None:
    """`q = q * s` is the rank of the q before it, and a binding after the point asked about
    does not count."""
    code = "def f(x):\n    q = x.view(1, 2, 3)\n    q = q * 2\n    y = q\n    q = q.unsqueeze(0)\n"
    function = cst.parse_module(code).body[0]
    assert isinstance(function, cst.FunctionDef) and isinstance(function.body, cst.IndentedBlock)
    assert Ranks(function, function.body.body[2]).of(cst.Name("q")) == 3


CALLED = """
def apply_rotary_pos_emb(q, k, cos, sin):
    q_embed = q
    return q_embed

class LlamaAttention:
    def forward(self, hidden_states, cos, sin):
        # Hugging Face's LlamaAttention (4.30): q made 4-D here, rotated by a helper
        bsz, q_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states).view(bsz, q_len, self.num_heads, -1).transpose(1, 2)
        key_states = self.k_proj(hidden_states)
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        return self._attend(hidden_states.view(bsz, q_len, self.num_heads, -1), query_states)

    def _attend(self, q, rotated):
        return q
"""


def _asked(module: cst.Module, name: str) -> Ranks:
    """Ranks at the last statement of the function or method `name`, the whole file at hand."""
    for node in (*module.body, *(s for c in module.body if isinstance(c, cst.ClassDef) for s in c.body.body)):
        if isinstance(node, cst.FunctionDef) and node.name.value == name:
            assert isinstance(node.body, cst.IndentedBlock)
            return Ranks(node, node.body.body[-1], module)
    raise AssertionError(name)


def test_a_parameter_has_the_rank_every_call_in_the_file_passes() -> None:
    module = cst.parse_module(CALLED)
    rotary = _asked(module, "apply_rotary_pos_emb")
    assert rotary.of(cst.Name("q")) == 4  # the one call passes query_states, view(4 sizes)
    assert rotary.of(cst.Name("k")) is None  # the call passes a module's output
    attend = _asked(module, "_attend")
    assert attend.of(cst.Name("q")) == 4  # a method called as self._attend(...)
    assert attend.of(cst.Name("rotated")) is None  # a helper's return: not followed


@pytest.mark.parametrize(
    ("more", "why"),
    [
        ("\ndef other(x):\n    return apply_rotary_pos_emb(x.view(1, 2), x, x, x)\n", "a call passes 2-D"),
        ("\nROPE = apply_rotary_pos_emb\n", "referred to other than by a call"),
        ("\ndef other(x):\n    return apply_rotary_pos_emb(*x)\n", "the arguments are unpacked"),
    ],
)
def test_a_parameter_is_unproven_where_a_call_disagrees_or_is_not_seen(more: str, why: str) -> None:
    rotary = _asked(cst.parse_module(CALLED + more), "apply_rotary_pos_emb")
    assert rotary.of(cst.Name("q")) is None, why


def test_without_the_whole_file_a_parameter_is_not_followed() -> None:
    """Regions of a file may hold only some of the calls: then no call is believed."""
    function = cst.parse_module(CALLED).body[0]
    assert isinstance(function, cst.FunctionDef) and isinstance(function.body, cst.IndentedBlock)
    assert Ranks(function, function.body.body[-1]).of(cst.Name("q")) is None


MASKS = """
class WindowAttention:
    # timm's Swin and BEiT attention: which masks can be None where SDPA is called
    def _get_rel_pos_bias(self):
        bias = self.table[self.index.view(-1)].view(self.area, self.area, -1)
        return bias.permute(2, 0, 1).contiguous().unsqueeze(0)

    def _maybe_bias(self):
        if self.table is None:
            return None
        return self.table.unsqueeze(0)

    def forward(self, x, mask=None, shared=None):
        swin = self._get_rel_pos_bias()
        if mask is not None:
            swin = swin + mask.reshape(-1, self.num_heads, 4, 4)
        beit = None
        if self.table is not None:
            beit = self._get_rel_pos_bias()
        elif shared is not None:
            beit = shared
        sum_ = shared + 1
        maybe = self._maybe_bias()
        module = self.bias_module(x)
        bound_in_branch_only = x
        if mask is not None:
            bound_in_branch_only = mask.float()
        attn = x
"""


@pytest.mark.parametrize(
    ("name", "never"),
    [
        ("swin", True),  # a method whose every return is a tensor method's result, then a sum
        ("sum_", True),  # arithmetic on None raises: the value is never None
        ("bound_in_branch_only", False),  # the unconditional binding is a parameter
        ("beit", False),  # None, then tensors in branches
        ("maybe", False),  # a method that can return None
        ("module", False),  # a module's output: not seen
        ("mask", False),  # a parameter
    ],
)
def test_a_value_is_never_none_only_where_the_code_shows_it(name: str, never: bool) -> None:
    ranks = _asked(cst.parse_module(MASKS), "forward")
    assert ranks.never_none(cst.Name(name)) is never
