"""The run-time guards fused fixes write (the rules' `why_not_npu_*` helpers), checked against
torch_npu 2.13's own documentation of each operator's limits (its `_op_plugin_docs.py`, from the
pinned wheel tests/sources.py fetches): every limit read from the docs is where the guard draws
it, one step inside passes and one step outside is refused. The guards read only a tensor's
metadata (device, rank, dtype, shape), so plain stand-ins carry it here."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from npu_migrate.rules.load import load_rules
from tests.sources import torch_npu_sources

torch = pytest.importorskip("torch")

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


@dataclass
class Meta:
    """What a guard reads of a tensor."""

    shape: tuple[int, ...]
    dtype: Any = field(default_factory=lambda: torch.float16)
    device: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(type="npu"))

    def dim(self) -> int:
        return len(self.shape)


def guard(name: str):
    """The guard helper `name` as the rules write it into a file."""
    codes = {code for rule in load_rules() if rule.fix for n, code in rule.fix.helpers.items() if n == name}
    assert len(codes) == 1, f"{name}: one text in every rule that writes it"
    namespace: dict[str, Any] = {"torch": torch}
    exec(codes.pop(), namespace)
    return namespace[name]


@pytest.fixture(scope="module")
def docs() -> str:
    return (torch_npu_sources() / "_op_plugin_docs.py").read_text(encoding="utf-8")


def section(docs: str, operator: str) -> str:
    """The documentation of one operator: from its signature line (`torch_npu. npu_geglu(` has a
    space) to the next signature."""
    signature = re.search(rf"^torch_npu\.\s*{operator}\(", docs, re.MULTILINE)
    assert signature, f"no signature of {operator} in the docs"
    end = docs.find("\ntorch_npu.", signature.start() + 1)
    return docs[signature.start() : end]


def number(pattern: str, text: str) -> int:
    found = re.search(pattern, text)
    assert found, f"the docs no longer say {pattern!r}"
    return int(found.group(1))


def test_the_attention_guard_draws_the_documented_limits(docs: str) -> None:
    text = section(docs, "npu_fusion_attention")
    max_head_dim = number(r"D: Head Dim必须满足Dq=Dk和Dk≥Dv\uff0c取值范围1~(\d+)", text)
    max_heads = number(r"Nq取值范围1~(\d+)", text)
    dtypes = re.search(r"query: Tensor类型, 数据类型支持([^,]+),", text)
    assert dtypes is not None
    documented = {DTYPES[name] for name in dtypes.group(1).split("、")}
    why_not = guard("why_not_npu_fusion_attention")

    def asked(heads: int = 2, kv_heads: int = 2, head_dim: int = 64, dtype=torch.float16, rank: int = 4):
        q = Meta((1, heads, 4, head_dim)[-rank:] if rank <= 4 else (1, 1, heads, 4, head_dim), dtype)
        kv = Meta((1, kv_heads, 6, head_dim) if rank == 4 else q.shape, dtype)
        return why_not(q, kv, kv, scale=0.125)

    assert asked(head_dim=max_head_dim) is None
    assert "head dim" in asked(head_dim=max_head_dim + 1)
    assert asked(heads=max_heads, kv_heads=max_heads // 4) is None
    assert "query heads" in asked(heads=max_heads + 4, kv_heads=4)
    assert "query heads" in asked(heads=6, kv_heads=4), "a multiple of the key heads"
    assert documented == set(DTYPES.values())
    assert all(asked(dtype=dtype) is None for dtype in documented)
    assert "float64" in asked(dtype=torch.float64)
    assert "5-D" in asked(rank=5)
    off = Meta((1, 2, 4, 64), device=SimpleNamespace(type="cpu"))
    assert why_not(off, off, off) == "not on the NPU"
    assert why_not(Meta((1, 2, 4, 64)), Meta((1, 2, 4, 64)), Meta((1, 2, 4, 64)), scale=Meta(())) is not None


class Mask(Meta):
    """A mask stand-in: its metadata, and whether some row of it is all True."""

    def __init__(self, shape: tuple[int, ...], dtype: Any = torch.bool, full_row: bool = False) -> None:
        super().__init__(shape, dtype)
        self.full_row = full_row

    def all(self, dim: int) -> SimpleNamespace:
        return SimpleNamespace(any=lambda: self.full_row)


def test_the_megatron_core_attention_guard_draws_the_documented_limits(docs: str) -> None:
    """Megatron's [s, b, n, d] tensors (NPU976): the documented head dim, head counts and
    dtypes, the mask formats the docs list (BNSS, B1SS, 11SS, SS) and no other, and no row all
    masked ("atten_mask中不能存在某一行全1的场景")."""
    text = section(docs, "npu_fusion_attention")
    max_head_dim = number(r"D: Head Dim必须满足Dq=Dk和Dk≥Dv\uff0c取值范围1~(\d+)", text)
    max_heads = number(r"Nq取值范围1~(\d+)", text)
    formats = re.search(r"输入shape类型支持(.+?)\.", text)
    assert formats is not None and formats.group(1) == "BNSS格式、B1SS格式、11SS格式、SS格式"
    assert "atten_mask中不能存在某一行全1的场景" in text
    why_not = guard("why_not_npu_core_attention")
    causal = SimpleNamespace(attn_mask_type=SimpleNamespace(name="causal"), scale=None)
    sizes = {"B": 2, "N": 4, "1": 1}

    def asked(heads=4, kv_heads=4, head_dim=64, dtype=torch.bfloat16, mask=None, sk=8):
        q = Meta((8, 2, heads, head_dim), dtype)
        kv = Meta((sk, 2, kv_heads, head_dim), dtype)
        return why_not(q, kv, kv, mask, causal)

    assert asked(head_dim=max_head_dim) is None
    assert "head dim" in asked(head_dim=max_head_dim + 1)
    assert asked(heads=max_heads, kv_heads=max_heads // 4) is None
    assert "query heads" in asked(heads=max_heads + 4, kv_heads=4)
    assert "query heads" in asked(heads=6, kv_heads=4)
    assert all(asked(dtype=dtype) is None for dtype in DTYPES.values())
    assert "float64" in asked(dtype=torch.float64)
    for documented in ("BNSS", "B1SS", "11SS", "SS"):
        shape = (*(sizes[c] for c in documented.removesuffix("SS")), 8, 8)
        assert asked(mask=Mask(shape)) is None, documented
    assert "not boolean" in asked(mask=Mask((2, 1, 1, 8))), "a key-padding mask that broadcasts"
    assert "not boolean" in asked(mask=Mask((1, 1, 8, 8), torch.float16))
    assert "all masked" in asked(mask=Mask((1, 1, 8, 8), full_row=True))
    assert "causal" in asked(sk=12), "a causal softmax given no mask over different lengths"
    assert asked(sk=12, mask=Mask((1, 1, 8, 12))) is None


def test_the_rotary_guard_draws_the_documented_limits(docs: str) -> None:
    text = section(docs, "npu_rotary_mul")
    below_head_dim = number(r"D < (\d+)\uff0c且为2的倍数", text)
    below_batch_heads = number(r"B, N < (\d+)", text)
    below_interleaved = number(r"B \* N < (\d+)", text)
    assert re.search(r"input\uff1a必选输入\uff0c4维Tensor\uff0c数据类型float16, bfloat16, float32", text)
    why_not = guard("why_not_npu_rotary_mul")

    def asked(shape: tuple[int, ...], table: tuple[int, ...] | None = None, mode: str = "half", dtype=None):
        table = table or ((1, 1, shape[2], shape[-1]) if len(shape) == 4 else shape)
        x = Meta(shape, dtype or torch.bfloat16)
        return why_not(x, Meta(table, x.dtype), Meta(table, x.dtype), mode)

    assert asked((1, 2, 8, below_head_dim - 2)) is None
    assert "D " in asked((1, 2, 8, below_head_dim))
    assert "D " in asked((1, 2, 8, 63)), "D must be even"
    assert asked((below_batch_heads - 1, 2, 4096, 64)) is None
    assert "B and N" in asked((below_batch_heads, 2, 4096, 64))
    assert asked((2, below_interleaved // 2 - 1, 4096, 64), mode="interleave") is None
    assert "B and N" in asked((2, below_interleaved // 2, 4096, 64), mode="interleave")
    assert "4-D" in asked((2, 8, 64), (8, 64))
    assert "float64" in asked((1, 2, 8, 64), dtype=torch.float64)
    assert all(asked((1, 2, 8, 64), dtype=dtype) is None for dtype in DTYPES.values())
    assert "cos and sin" in asked((2, 2, 8, 64), (2, 1, 8, 64), mode="interleave"), (
        "interleave: 11SD, 1S1D, S11D"
    )
    assert asked((2, 2, 8, 64), (2, 1, 8, 64)) is None, "half: B1SD"
    assert "neither" in why_not(Meta((1, 2, 8, 64)), Meta((8, 64)), Meta((8, 64)), None)


@pytest.mark.parametrize(
    ("operator", "ranks", "dtypes"),
    [  # what each operator's documentation says of its input: the ranks, the dtypes
        ("npu_rms_norm", r"self\uff1aTensor类型\uff0c支持([^\uff0c]+)\uff0c输入shape支持(\d)-(\d)维", None),
        ("npu_swiglu", r"shape支持(\d)-(\d)维\uff0cdtype支持([^\u3002]+)类型", None),
        ("npu_geglu", None, r"数据类型支持(FLOAT32、FLOAT16、BFLOAT16)"),
    ],
)
def test_the_elementwise_guards_draw_the_documented_limits(
    docs: str, operator: str, ranks: str | None, dtypes: str | None
) -> None:
    text = section(docs, operator)
    why_not = guard(f"why_not_{operator}")
    found = re.search(ranks or dtypes or "", text)
    assert found, f"the docs of {operator} no longer say {ranks or dtypes!r}"
    words = " ".join(found.groups()).lower().replace("bf16", "bfloat16").replace("fp", "float")
    documented = [dtype for name, dtype in DTYPES.items() if name in words]
    assert len(documented) == 3, words
    assert all(why_not(Meta((2, 8), dtype)) is None for dtype in documented)
    assert "float64" in why_not(Meta((2, 8), torch.float64))
    assert why_not(Meta((2, 8), device=SimpleNamespace(type="cpu"))) == "not on the NPU"
    if ranks:
        low, high = (int(g) for g in found.groups() if g.isdigit())
        assert why_not(Meta((2,) * low)) is None and why_not(Meta((2,) * high)) is None
        assert why_not(Meta((2,) * (high + 1))) is not None
        if low > 1:
            assert why_not(Meta((2,) * (low - 1))) is not None
    if operator != "npu_rms_norm":  # two halves of the last axis
        assert why_not(Meta((2, 7))) is not None
