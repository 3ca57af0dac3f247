"""Each fused-operator rule, proven numerically: the original GPU code and the code the rule
writes run on the same weights and inputs, and outputs and gradients agree, in fp32 and in bf16
(at bf16 tolerance). The rewrites run on the emulated NPU, all in one child process
(tests/emulation/fused_numerics.py under `npu-migrate run --emulate`: the emulation changes
torch for the whole process), where a guarded swap's guard must have let the fused operator
run, or, for the cases built to fall back, given its reason and left the original's numbers."""

from __future__ import annotations

import json
import re
import sys
import types
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from npu_migrate.emulation import ops, optim  # noqa: E402
from npu_migrate.engine.index import RuleIndex  # noqa: E402
from npu_migrate.engine.source import migrate_source  # noqa: E402
from npu_migrate.model import Applicability  # noqa: E402
from npu_migrate.rules.files import opt_in_sets  # noqa: E402
from npu_migrate.rules.load import load_rules  # noqa: E402
from tests.fixture_cases import run_cli  # noqa: E402

FUSED = RuleIndex([r for r in load_rules() if r.category == "fused"])
UNSAFE = frozenset({Applicability.safe, Applicability.unsafe})
HEADER = "import torch\nimport torch.nn.functional as F\n\n"
ROTATE_HALF = "def rotate_half(x):\n    a, b = x.chunk(2, dim=-1)\n    return torch.cat((-b, a), dim=-1)\n\n"
ROTATE_PAIRS = (  # kornia's lightglue.py: a rotate_half that rotates neighbouring pairs
    "def rotate_half(x):\n    x = x.unflatten(-1, (-1, 2))\n    x1, x2 = x.unbind(dim=-1)\n"
    "    return torch.stack((-x2, x1), dim=-1).flatten(start_dim=-2)\n\n"
)


def reference_flash_attn_func(
    q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), deterministic=False
):
    """flash-attn's documented semantics in plain torch: (B, S, N, D) inputs, GQA, and since
    2.1 a causal mask and a sliding window aligned to the bottom-right corner: query i sees keys
    j in [i + Sk - Sq - left, i + Sk - Sq + right] (a negative side unbounded; causal: right 0)."""
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    s_q, s_k = q.shape[-2], k.shape[-2]
    left, right = window_size
    right = 0 if causal else right
    mask = None
    if left >= 0 or right >= 0:
        offset = torch.arange(s_k)[None, :] - torch.arange(s_q)[:, None] - (s_k - s_q)
        mask = torch.ones(s_q, s_k, dtype=torch.bool)
        if right >= 0:
            mask &= offset <= right
        if left >= 0:
            mask &= offset >= -left
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=softmax_scale, enable_gqa=True
    )
    return out.transpose(1, 2)


def reference_flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    deterministic=False,
):
    """Packed sequences (total, heads, dim) with cumulative starts: each sequence alone."""
    outs = []
    for i in range(len(cu_seqlens_q) - 1):
        qs, qe, ks, ke = cu_seqlens_q[i], cu_seqlens_q[i + 1], cu_seqlens_k[i], cu_seqlens_k[i + 1]
        one = reference_flash_attn_func(
            q[None, qs:qe], k[None, ks:ke], v[None, ks:ke], dropout_p, softmax_scale, causal, window_size
        )
        outs.append(one[0])
    return torch.cat(outs)


def references() -> dict[str, types.ModuleType]:
    """What the original code imports that is not here: `flash_attn` and apex's optimizers as
    plain-torch references of their documented semantics."""
    flash = types.ModuleType("flash_attn")
    flash.flash_attn_func = reference_flash_attn_func  # type: ignore[attr-defined]
    flash.flash_attn_varlen_func = reference_flash_attn_varlen_func  # type: ignore[attr-defined]
    apex, apex_optimizers = types.ModuleType("apex"), types.ModuleType("apex.optimizers")
    apex_optimizers.FusedAdam = reference_fused_adam  # type: ignore[attr-defined]
    apex_optimizers.FusedSGD = torch.optim.SGD  # type: ignore[attr-defined]  # apex's default update
    apex.optimizers = apex_optimizers  # type: ignore[attr-defined]
    return {"flash_attn": flash, "apex": apex, "apex.optimizers": apex_optimizers}


@pytest.fixture(autouse=True)
def emulated_torch_npu(monkeypatch: pytest.MonkeyPatch) -> None:
    """In this process, `import torch_npu` in rewritten code gets the emulated operators (no
    device emulation is installed: the tensors live on the CPU), for the rules without a
    run-time guard; the references stand in for the CUDA packages."""
    module = types.ModuleType("torch_npu")
    for name in ops.__all__:
        setattr(module, name, getattr(ops, name))
    module.optim = optim  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch_npu", module)
    for name, reference in references().items():
        monkeypatch.setitem(sys.modules, name, reference)


def reference_fused_adam(
    params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8, adam_w_mode=True, weight_decay=0.0,
    amsgrad=False,
):  # fmt: skip
    """apex FusedAdam's documented defaults: AdamW mode, no weight decay."""
    assert bias_correction and adam_w_mode
    return torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad)


def rewritten(code: str, expect: str) -> str:
    result = migrate_source(code.encode(), FUSED, UNSAFE)
    assert result.new_source is not None, [f.rule.code for f in result.findings]
    new = result.new_source.decode()
    assert expect in new, new
    return new


def function(code: str, name: str = "f", guards: Counter[str] | None = None):
    """`name` from the code; `guards`: where to count what its run-time guards say ("fused" for
    None, else the reason), which the code's functions look up in its namespace as they run."""
    namespace: dict = {}
    exec(compile(code, "<rule test>", "exec"), namespace)
    if guards is not None:
        for helper, guard in list(namespace.items()):
            if helper.startswith("why_not_npu_"):
                namespace[helper] = counted(guard, guards)
    return namespace[name]


def counted(guard: Callable, outcomes: Counter[str]) -> Callable:
    def asked(*args, **kwargs):
        why = guard(*args, **kwargs)
        outcomes["fused" if why is None else why] += 1
        return why

    return asked


def run(fn, inputs: list, dtype, device: str = "cpu") -> list[torch.Tensor]:
    """The output and the input gradients of fn on inputs cast to dtype (floating point ones)
    on `device`, as fp32 tensors on the CPU."""
    leaves = [
        t.detach().to(device=device, dtype=dtype).requires_grad_() if t.is_floating_point() else t.to(device)
        for t in inputs
    ]
    out = fn(*leaves)
    out.float().pow(2).sum().backward()
    return [out.detach().float().cpu(), *(t.grad.float().cpu() for t in leaves if t.grad is not None)]


def compare(original, fused, inputs: list, dtype, device: str = "cpu") -> None:
    """fp32: the fused code matches the original closely. bf16: the fused code is as accurate as
    the original run in bf16, against the fp32 original: each tensor within 2^-6 of its scale (a
    few bf16 steps of rounding), or no further from the truth than twice the original's own bf16
    error where that is larger (a fused kernel rounds once where the original rounds after every
    operation; a scaled or shifted result is far outside either)."""
    truth = run(original, inputs, torch.float32)
    got_all = run(fused, inputs, dtype, device)
    assert len(got_all) == len(truth) > 1
    if dtype == torch.float32:
        for got, want in zip(got_all, truth, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        return
    for got, want, plain in zip(got_all, truth, run(original, inputs, dtype), strict=True):
        tolerance = max(2**-6 * want.abs().max().item(), 2 * (plain - want).abs().max().item())
        torch.testing.assert_close(got, want, rtol=2**-6, atol=tolerance)


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=GENERATOR)


GENERATOR = torch.Generator().manual_seed(0)


def packed_sequences(query_heads: int) -> list[torch.Tensor]:
    """Two packed sequences (3 and 4 query tokens, 4 and 6 key tokens), 2 key heads."""
    q, k, v = randn(7, query_heads, 8), randn(10, 2, 8), randn(10, 2, 8)
    return [q, k, v, torch.tensor([0, 3, 7]), torch.tensor([0, 4, 10])]


DTYPES = [torch.float32, torch.bfloat16]
MEGATRON_ROTATE_HALF = (  # megatron/core/models/common/embeddings/rope_utils.py (core_v0.12.1)
    "def _rotate_half(x, rotary_interleaved):\n"
    "    if not rotary_interleaved:\n"
    "        x1, x2 = torch.chunk(x, 2, dim=-1)\n"
    "        return torch.cat((-x2, x1), dim=-1)\n"
    "    else:\n"
    "        x1 = x[:, :, :, ::2]\n"
    "        x2 = x[:, :, :, 1::2]\n"
    "        x_new = torch.stack((-x2, x1), dim=-1)\n"
    "        return x_new.view(x_new.shape[0], x_new.shape[1], x_new.shape[2], -1)\n\n"
)
MEGATRON_ROPE = (  # its _apply_rotary_pos_emb_bshd: t (S, B, N, D), freqs (S, 1, 1, D)
    "    cos_ = torch.cos(freqs).to(t.dtype)\n"
    "    sin_ = torch.sin(freqs).to(t.dtype)\n"
    "    return (t * cos_) + (_rotate_half(t, {flag}) * sin_)\n"
)

COMPLEX_ROPE = (  # RoPE on complex numbers: x's neighbouring pairs times unit frequencies
    "def f(x, angles):\n"
    "    x_ = torch.view_as_complex(x.{dtype}().reshape(*x.shape[:-1], -1, 2))\n"
    "    freqs = torch.polar(torch.ones_like(angles.{dtype}()), angles.{dtype}())\n"
    "    return torch.view_as_real(x_ * freqs).flatten({start}).type_as(x)\n"
)
CASES = {
    "NPU901-causal": (
        "def f(q, k, v):\n" + "    return F.scaled_dot_product_attention(q, k, v, is_causal=True)\n",
        "npu_fusion_attention",
        lambda: [randn(2, 4, 16, 8), randn(2, 4, 16, 8), randn(2, 4, 16, 8)],
    ),
    "NPU901-causal-gqa-cross-length": (
        "def f(q, k, v):\n"
        + "    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)\n",
        "sparse_mode=2",
        lambda: [randn(2, 4, 6, 8), randn(2, 2, 10, 8), randn(2, 2, 10, 8)],
    ),
    "NPU902-default-scale": (
        "def f(q, k, v):\n" + "    return F.scaled_dot_product_attention(q, k, v)\n",
        "scale=q.shape[-1] ** -0.5",
        lambda: [randn(1, 2, 5, 16), randn(1, 2, 7, 16), randn(1, 2, 7, 16)],
    ),
    "NPU902-explicit-scale": (
        "def f(q, k, v):\n" + "    return F.scaled_dot_product_attention(q, k, v, scale=0.3)\n",
        "scale=0.3",
        lambda: [randn(2, 2, 5, 8), randn(2, 2, 5, 8), randn(2, 2, 5, 8)],
    ),
    "NPU950-mask-none-fused": (
        "def f(q, k, v, attention_mask=None):\n"
        + "    return F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask, dropout_p=0.0)\n",
        "if why_not_npu_fusion_attention(q, k, v, attention_mask, q.shape[-1] ** -0.5) is None else",
        lambda: [randn(2, 2, 5, 8), randn(2, 2, 7, 8), randn(2, 2, 7, 8)],
    ),
    "NPU950-additive-mask-kept": (
        "def f(q, k, v, attention_mask=None):\n"
        + "    return F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask, dropout_p=0.0)\n",
        "if why_not_npu_fusion_attention(q, k, v, attention_mask, q.shape[-1] ** -0.5) is None else",
        lambda: [randn(2, 2, 5, 8), randn(2, 2, 7, 8), randn(2, 2, 7, 8), randn(1, 1, 5, 7)],
    ),
    **{  # timm's Attention: the mask and the causal flag passed through, the flag either way
        f"NPU975-timm-attention-{name}": (
            f"def f(q, k, v, attn_mask=None, is_causal={flag}):\n"
            "    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal)\n",
            "sparse_mode=2 if is_causal else 0)[0] if why_not_npu_fusion_attention(q, k, v, attn_mask",
            lambda: [randn(2, 4, 6, 8), randn(2, 4, 10, 8), randn(2, 4, 10, 8)],
        )
        for name, flag in (("causal", True), ("not-causal", False))
    },
    "NPU920-flash-causal-bottom-right": (
        "from flash_attn import flash_attn_func\n\n"
        "def f(q, k, v):\n    return flash_attn_func(q, k, v, causal=True)\n",
        "sparse_mode=3",
        lambda: [randn(2, 5, 4, 8), randn(2, 9, 2, 8), randn(2, 9, 2, 8)],
    ),
    "NPU921-flash-scaled": (
        "from flash_attn import flash_attn_func\n\n"
        "def f(q, k, v):\n    return flash_attn_func(q, k, v, softmax_scale=0.25)\n",
        '"BSND", scale=0.25)[0]',
        lambda: [randn(1, 6, 2, 16), randn(1, 6, 2, 16), randn(1, 6, 2, 16)],
    ),
    "NPU920-flash-scale-none": (
        "from flash_attn import flash_attn_func\n\n"
        "def f(q, k, v):\n    return flash_attn_func(q, k, v, softmax_scale=None, causal=True)\n",
        "scale=q.shape[-1] ** -0.5",
        lambda: [randn(2, 5, 4, 8), randn(2, 5, 4, 8), randn(2, 5, 4, 8)],
    ),
    "NPU917-swiglu-chunk": (
        "def f(x, w):\n    x = x @ w\n    a, b = x.chunk(2, dim=-1)\n    return F.silu(a) * b\n",
        "torch_npu.npu_swiglu(x, dim=-1)",
        lambda: [randn(3, 5, 8), randn(8, 12)],
    ),
    "NPU917-swiglu-chunk-of-call": (
        "def f(x, w):\n    a, b = torch.matmul(x, w).chunk(2, dim=-1)\n    return F.silu(a) * b\n",
        "    a_b = torch.matmul(x, w)\n    a, b = a_b.chunk(2, dim=-1)\n"
        "    return (torch_npu.npu_swiglu(a_b, dim=-1) if why_not_npu_swiglu(a_b) is None",
        lambda: [randn(3, 5, 8), randn(8, 12)],
    ),
    "NPU926-varlen-causal": (
        "from flash_attn import flash_attn_varlen_func\n\n"
        "def f(q, k, v, cu_q, cu_k):\n"
        "    return flash_attn_varlen_func(q, k, v, cu_q, cu_k, 4, 6, causal=True)\n",
        '"TND"',
        lambda: packed_sequences(query_heads=4),
    ),
    "NPU927-varlen": (
        "from flash_attn import flash_attn_varlen_func\n\n"
        "def f(q, k, v, cu_q, cu_k):\n"
        "    return flash_attn_varlen_func(q, k, v, cu_q, cu_k, 4, 6, softmax_scale=0.3)\n",
        "actual_seq_kvlen=cu_k[1:].tolist())[0]",
        lambda: packed_sequences(query_heads=2),
    ),
    "NPU929-varlen-wan-form": (  # Wan2.1's flash_attention: starts computed from lengths, all by keyword
        "import flash_attn\n\n"
        "def attend(q, k, v, q_lens, k_lens, causal, window_size):\n"
        "    return flash_attn.flash_attn_varlen_func(\n"
        "        q=q, k=k, v=v,\n"
        "        cu_seqlens_q=torch.cat([q_lens.new_zeros([1]), q_lens]).cumsum(0, dtype=torch.int32),\n"
        "        cu_seqlens_k=torch.cat([k_lens.new_zeros([1]), k_lens]).cumsum(0, dtype=torch.int32),\n"
        "        max_seqlen_q=4, max_seqlen_k=6, dropout_p=0.0, softmax_scale=None,\n"
        "        causal=causal, window_size=window_size, deterministic=False)\n\n"
        "def f(q, k, v):\n"
        "    lens = (torch.tensor([3, 4]), torch.tensor([4, 6]))\n"
        "    full = attend(q, k, v, *lens, causal=False, window_size=(-1, -1))\n"
        "    causal = attend(q, k, v, *lens, causal=True, window_size=(-1, -1))\n"
        "    band = attend(q, k, v, *lens, causal=False, window_size=(2, 1))\n"
        "    causal_band = attend(q, k, v, *lens, causal=True, window_size=(1, -1))\n"
        "    return torch.stack([full, causal, band, causal_band])\n",
        "return npu_flash_attn_varlen_func(q, k, v, torch.cat(",
        lambda: packed_sequences(query_heads=4)[:3],
    ),
    "NPU930-flash-variable-causal-window": (
        "from flash_attn import flash_attn_func\n\n"
        "def attend(q, k, v, causal, window):\n"
        "    return flash_attn_func(q, k, v, causal=causal, window_size=window)\n\n"
        "def f(q, k, v):\n"
        "    windows = ((-1, -1), (3, 0), (-1, 2))\n"
        "    return torch.stack([attend(q, k, v, c, w) for c in (False, True) for w in windows])\n",
        "return npu_flash_attn_func(q, k, v, causal=causal, window_size=window)",
        lambda: [randn(2, 5, 4, 8), randn(2, 9, 2, 8), randn(2, 9, 2, 8)],
    ),
    "NPU954-geglu-chunk-of-call": (  # the latent-diffusion GEGLU (CogVideo's sat), erf GELU
        "def f(x, w):\n    h, gate = torch.matmul(x, w).chunk(2, dim=-1)\n    return h * F.gelu(gate)\n",
        "    h_gate = torch.matmul(x, w)\n    h, gate = h_gate.chunk(2, dim=-1)\n"
        "    return (torch_npu.npu_geglu(h_gate, dim=-1, approximate=0)[0] if why_not_npu_geglu(h_gate)",
        lambda: [randn(3, 5, 8), randn(8, 12)],
    ),
    "NPU958-geglu-method": (  # diffusers' GEGLU (models/attention.py, 0.21): its own gelu method
        "class GEGLU:\n    def __init__(self, w):\n        self.w = w\n\n"
        '    def gelu(self, gate):\n        if gate.device.type != "mps":\n'
        "            return F.gelu(gate)\n"
        "        return F.gelu(gate.to(dtype=torch.float32)).to(dtype=gate.dtype)\n\n"
        "    def forward(self, x):\n        h, gate = torch.matmul(x, self.w).chunk(2, dim=-1)\n"
        "        return h * self.gelu(gate)\n\n\n"
        "def f(x, w):\n    return GEGLU(w).forward(x)\n",
        "        return (torch_npu.npu_geglu(h_gate, dim=-1, approximate=0)[0] if why_not_npu_geglu(h_gate)",
        lambda: [randn(3, 5, 8), randn(8, 12)],
    ),
    "NPU904-rms-norm": (
        "def f(x, w):\n    return F.rms_norm(x, (x.shape[-1],), w, 1e-5)\n",
        "npu_rms_norm(x, w, epsilon=1e-5)",
        lambda: [randn(3, 5, 16), randn(16)],
    ),
    "NPU904-rms-norm-default-eps": (
        "def f(x, w):\n    return F.rms_norm(x, (16,), w)\n",
        "epsilon=torch.finfo(torch.float32).eps",
        lambda: [randn(3, 5, 16), randn(16)],
    ),
    "NPU904-rms-norm-eps-none": (
        "def f(x, w):\n    return F.rms_norm(x, (16,), w, eps=None)\n",
        "epsilon=torch.finfo(torch.float32).eps",
        lambda: [randn(3, 5, 16), randn(16)],
    ),
    "NPU905-hand-written-rms-norm": (
        "def f(x, w):\n    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w\n",
        "npu_rms_norm(x, torch.ones(",
        lambda: [randn(2, 7, 32), randn(32)],
    ),
    "NPU905-qk-norm-mean-keyword": (  # a QK norm, the mean's dim by keyword, the square as ** 2
        "def f(q, w):\n    return q * torch.rsqrt((q ** 2).mean(dim=-1, keepdim=True) + 1e-6) * w\n",
        "if why_not_npu_rms_norm(q) is None",
        lambda: [randn(2, 4, 7, 16), randn(16)],
    ),
    "NPU974-rms-norm-module": (  # the module torch builds (Megatron's --normalization RMSNorm)
        "def f(x, w):\n    norm = torch.nn.RMSNorm(16, eps=1e-5, device=x.device, dtype=x.dtype)\n"
        "    return torch.func.functional_call(norm, {'weight': w}, (x,))\n",
        "norm = NpuRMSNorm(16, eps=1e-5, device=x.device, dtype=x.dtype)",
        lambda: [randn(3, 5, 16), randn(16)],
    ),
    "NPU917-megatron-swiglu": (  # megatron/core/fusions/fused_bias_swiglu.py
        "def f(y):\n    y_1, y_2 = torch.chunk(y, 2, -1)\n    return F.silu(y_1) * y_2\n",
        "torch_npu.npu_swiglu(y, dim=-1)",
        lambda: [randn(5, 2, 12)],
    ),
    "NPU973-megatron-rope-half": (
        MEGATRON_ROTATE_HALF + "def f(t, freqs):\n" + MEGATRON_ROPE.format(flag=False),
        "npu_rotary_mode(_rotate_half, False)",
        lambda: [randn(6, 2, 3, 8), randn(6, 1, 1, 8)],
    ),
    "NPU973-megatron-rope-interleaved": (
        MEGATRON_ROTATE_HALF + "def f(t, freqs):\n" + MEGATRON_ROPE.format(flag=True),
        "npu_rotary_mode(_rotate_half, True)",
        lambda: [randn(6, 2, 3, 8), randn(6, 1, 1, 8)],
    ),
    "NPU906-rotary-half": (
        ROTATE_HALF + "def f(q, cos, sin):\n" + "    return (q * cos) + (rotate_half(q) * sin)\n",
        "npu_rotary_mul(q, npu_rotary_table(cos, q), npu_rotary_table(sin, q), npu_rotary_mode(rotate_half))",
        lambda: [randn(2, 3, 6, 8), randn(1, 1, 6, 8), randn(1, 1, 6, 8)],
    ),
    "NPU906-rotary-half-3d-table": (  # pixtral's (S, D) table unsqueezed at 0: broadcasting reads 11SD
        ROTATE_HALF + "def f(q, cos, sin):\n" + "    return (q * cos) + (rotate_half(q) * sin)\n",
        "npu_rotary_table(cos, q)",
        lambda: [randn(2, 3, 6, 8), randn(1, 6, 8), randn(1, 6, 8)],
    ),
    "NPU906-rotary-interleave-cogvideo": (
        "from einops import rearrange\n\n"
        "def rotate_half(x):\n"  # CogVideo's sat/dit_video_concat.py
        '    x = rearrange(x, "... (d r) -> ... d r", r=2)\n'
        "    x1, x2 = x.unbind(dim=-1)\n"
        "    x = torch.stack((-x2, x1), dim=-1)\n"
        '    return rearrange(x, "... d r -> ... (d r)")\n\n'
        "def f(q, cos, sin):\n" + "    return q * cos + rotate_half(q) * sin\n",
        "npu_rotary_mode(rotate_half)",
        lambda: [randn(1, 2, 5, 8), randn(1, 1, 5, 8), randn(1, 1, 5, 8)],
    ),
    "NPU906-rotary-interleave-kornia": (
        ROTATE_PAIRS + "def f(q, cos, sin):\n" + "    return q * cos + rotate_half(q) * sin\n",
        "npu_rotary_mode(rotate_half)",
        lambda: [randn(2, 3, 6, 8), randn(1, 1, 6, 8), randn(1, 1, 6, 8)],
    ),
    "NPU902-window-5d-falls-back": (  # Swin-style windows: (B, windows, heads, tokens, dim)
        "def f(q, k, v):\n    return F.scaled_dot_product_attention(q, k, v)\n",
        "why_not_npu_fusion_attention(q, k, v",
        lambda: [randn(2, 3, 2, 5, 8), randn(2, 3, 2, 5, 8), randn(2, 3, 2, 5, 8)],
    ),
    "NPU906-rotary-3d-falls-back": (  # x not 4-D: the operator refuses, the expression runs
        ROTATE_HALF + "def f(q, cos, sin):\n    return (q * cos) + (rotate_half(q) * sin)\n",
        "why_not_npu_rotary_mul(q, cos, sin",
        lambda: [randn(3, 6, 8), randn(6, 8), randn(6, 8)],
    ),
    "NPU978-complex-rope": (  # Meta's Llama 3 reference: x (B, S, N, D), freqs_cis (1, S, 1, D/2)
        COMPLEX_ROPE.format(dtype="float", start=3),
        "npu_complex_rotary(x_, freqs, 3)",
        lambda: [randn(2, 6, 3, 8), randn(1, 6, 1, 4)],
    ),
    "NPU978-complex-rope-3d": (  # Wan2.1's rope_apply, one sample: x (S, N, D), freqs (S, 1, D/2)
        COMPLEX_ROPE.format(dtype="float", start=2),
        "npu_complex_rotary(x_, freqs, 2)",
        lambda: [randn(6, 3, 8), randn(6, 1, 4)],
    ),
    "NPU978-complex-rope-float64-falls-back": (  # Wan2.1 rotates in float64
        COMPLEX_ROPE.format(dtype="double", start=3),
        "npu_complex_rotary(x_, freqs, 3)",
        lambda: [randn(2, 6, 3, 8), randn(1, 6, 1, 4)],
    ),
}
# The cases built for a guard to refuse: the reason it must give (the fused operator never runs).
FALLS_BACK = {
    "NPU902-window-5d-falls-back": "5-D, not 4-D",
    "NPU906-rotary-3d-falls-back": "x is 3-D",
    "NPU978-complex-rope-float64-falls-back": "torch.float64",
    "NPU950-additive-mask-kept": "a mask is given",
}


def dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def run_case(case: str, dtype) -> dict:
    """One case on the emulated NPU: the original on the CPU in fp32 against the rewrite on the
    NPU; what went wrong (None) and what its guards said."""
    body, expect, make_inputs = CASES[case]
    original = HEADER + body
    fused = rewritten(original, expect)
    imported = re.search(r"^(import|from) flash_attn\b", fused, re.M)
    assert not imported, "the CUDA-only import must go with its last use"
    guards: Counter[str] = Counter()
    compare(function(original), function(fused, guards=guards), make_inputs(), dtype, device="npu")
    return {"guarded": "why_not_npu_" in fused, "guards": dict(guards)}


def run_statements(case: str, dtype) -> dict:
    """One attention module on the emulated NPU, as test_fused_statements_train_like_the_original
    checks it."""
    source, expect = ATTENTION_MODULES[case]
    result = migrate_source((HEADER + source).encode(), STATEMENTS_INDEX, UNSAFE)
    assert result.new_source is not None, [(f.rule.code, f.held) for f in result.findings]
    fused_source = result.new_source.decode()
    assert expect in fused_source, fused_source
    inputs = randn(3, 6, 32)
    guards: Counter[str] = Counter()

    def trained(code: str, run_dtype, device: str, counts: Counter[str] | None = None) -> list[torch.Tensor]:
        torch.manual_seed(0)
        net = function(code, "Net", counts)().to(device=device, dtype=run_dtype)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        net.eval()
        outputs = [net(inputs.to(device=device, dtype=run_dtype)).detach().float().cpu()]
        net.train()
        for _ in range(3):
            optimizer.zero_grad()
            net(inputs.to(device=device, dtype=run_dtype)).float().pow(2).mean().backward()
            optimizer.step()
        return outputs + [p.detach().float().cpu() for p in net.parameters()]

    truth = trained(HEADER + source, torch.float32, "cpu")
    got = trained(fused_source, dtype, "npu", guards)
    if dtype == torch.float32:
        for a, b in zip(got, truth, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    else:
        plain = trained(HEADER + source, dtype, "cpu")
        for a, b, c in zip(got, truth, plain, strict=True):
            tolerance = max(2**-6 * b.abs().max().item(), 2 * (c - b).abs().max().item())
            torch.testing.assert_close(a, b, rtol=2**-6, atol=tolerance)
    return {"guarded": True, "guards": dict(guards)}


@pytest.fixture(scope="module")
def on_the_npu(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Every case run once, in one child process on the emulated NPU: by `case-dtype`, what
    went wrong (`error`) or what its guards said."""
    out = tmp_path_factory.mktemp("fused") / "results.json"
    driver = Path(__file__).with_name("fused_numerics.py")
    result = run_cli("run", "--emulate", driver, out, cwd=out.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(out.read_text())


def check(outcome: dict, case: str) -> None:
    assert outcome["error"] is None, outcome["error"]
    guards = outcome["guards"]
    if case in FALLS_BACK:
        assert "fused" not in guards and any(FALLS_BACK[case] in why for why in guards), guards
    elif outcome["guarded"]:
        assert guards.get("fused", 0) > 0 and len(guards) == 1, f"the fused path did not run: {guards}"


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_fused_rewrite_matches_the_original(on_the_npu: dict[str, dict], case: str, dtype) -> None:
    check(on_the_npu[f"{case}-{dtype_name(dtype)}"], case)


class _Placed(torch.nn.Sequential):
    """The harness trains on the CPU: moving the model to an accelerator keeps it there."""

    def cuda(self, device=None):
        return self


OPTIMIZERS = {  # the catalog writes torch's fused=True; the opt-in set torch_npu's NpuFused*
    "NPU910": "torch.optim.AdamW(params, lr=0.05, weight_decay=0.1)",
    "NPU911": "torch.optim.Adam(params, lr=0.05, betas=(0.8, 0.99))",
    "NPU912": "torch.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True)",
    "NPU924": "apex.optimizers.FusedAdam(params, lr=0.05)",
    "NPU925": "apex.optimizers.FusedSGD(params, 0.1, momentum=0.9)",
    "NPU941": "torch.optim.AdamW(params, lr=0.05, weight_decay=0.1)",
    "NPU942": "torch.optim.Adam(params, lr=0.05, betas=(0.8, 0.99))",
    "NPU943": "torch.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True)",
    "NPU944": "torch.optim.Adadelta(params, lr=1.0, rho=0.95)",
    "NPU945": "torch.optim.RMSprop(params, lr=0.01, alpha=0.9, momentum=0.5)",
}
NPU_FUSED = RuleIndex([r for r in load_rules(opt_in_sets().values()) if r.code.startswith("NPU94")])


@pytest.mark.parametrize("code", sorted(OPTIMIZERS))
def test_fused_optimizer_trains_like_the_original(code: str) -> None:
    # The opt-in rules apply only where the parameters are seen going to an accelerator.
    make = f"def make(model):\n    params = model.cuda().parameters()\n    return {OPTIMIZERS[code]}\n"
    original = HEADER + "import apex\n\n" + make
    if code.startswith("NPU94"):
        result = migrate_source(original.encode(), NPU_FUSED, UNSAFE)
        assert result.new_source is not None, [f.rule.code for f in result.findings]
        fused = result.new_source.decode()
        assert "torch_npu.optim.NpuFused" in fused, fused
    else:
        fused = rewritten(original, "fused=True)")
    if "apex" in OPTIMIZERS[code]:
        assert "import apex" not in fused, "the CUDA-only import must go with its last use"
    weights = []
    for source in (original, fused):
        torch.manual_seed(0)
        model = _Placed(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        optimizer = function(source, "make")(model)
        data = torch.randn(32, 8, generator=torch.Generator().manual_seed(1))
        for _ in range(5):
            optimizer.zero_grad()
            model(data).pow(2).mean().backward()
            optimizer.step()
        weights.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    torch.testing.assert_close(weights[1], weights[0], rtol=1e-5, atol=1e-6)


RMS_NORM_MODULE = """
class LlamaRMSNorm(torch.nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
"""
HF_RMS_NORMS = {  # transformers' LlamaRMSNorm.forward, by the version that writes it so
    "4.36": """\
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)
""",
    "4.30": """\
        input_dtype = hidden_states.dtype
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return (self.weight * hidden_states).to(input_dtype)
""",
}


def rms_norms(version: str, guards: Counter[str]) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The original norm and the fused one (on the NPU), with the same weight."""
    original = HEADER + RMS_NORM_MODULE + HF_RMS_NORMS[version]
    fused = rewritten(original, "npu_rms_norm(hidden_states, self.weight.to(hidden_states.dtype)")
    torch.manual_seed(0)
    original_norm = function(original, "LlamaRMSNorm")(64)
    fused_norm = function(fused, "LlamaRMSNorm", guards)(64)
    fused_norm.load_state_dict(original_norm.state_dict())
    return original_norm, fused_norm.to("npu")


def run_rms_norm(version: str, dtype) -> dict:
    """The Hugging Face LLaMA norm's forward, fused on the NPU against the original."""
    guards: Counter[str] = Counter()
    original_norm, fused_norm = rms_norms(version, guards)

    def through(norm):
        return lambda x, w: torch.func.functional_call(norm, {"weight": w}, (x,))

    weight = original_norm.weight.detach()
    compare(through(original_norm), through(fused_norm), [randn(2, 7, 64), weight], dtype, device="npu")
    return {"guarded": True, "guards": dict(guards)}


def run_rms_norm_fp32_weight(version: str, dtype) -> dict:
    """Norms kept in fp32 under a bf16 model (or autocast): torch_npu refuses a gamma of another
    dtype, so the fused forward casts it; output dtype and values are the original's."""
    guards: Counter[str] = Counter()
    original_norm, fused_norm = rms_norms(version, guards)
    x = randn(2, 7, 64).to(dtype)
    want, got = original_norm(x), fused_norm(x.to("npu")).cpu()
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.float(), want.float(), rtol=2**-7, atol=2**-7 * want.abs().max().item())
    return {"guarded": True, "guards": dict(guards)}


@pytest.mark.parametrize("version", sorted(HF_RMS_NORMS))
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
def test_the_llama_rms_norm_forward_matches(on_the_npu: dict[str, dict], version: str, dtype) -> None:
    check(on_the_npu[f"rms-norm-{version}-{dtype_name(dtype)}"], "")


@pytest.mark.parametrize("version", sorted(HF_RMS_NORMS))
def test_the_llama_rms_norm_takes_bf16_input_with_an_fp32_weight(
    on_the_npu: dict[str, dict], version: str
) -> None:
    check(on_the_npu[f"rms-norm-fp32-weight-{version}-bfloat16"], "")


def test_a_dropped_import_is_a_delete_not_a_finding() -> None:
    code = (
        "import torch\nfrom flash_attn import flash_attn_func\nout = flash_attn_func(q, k, v, causal=True)\n"
    )
    catalog = RuleIndex(load_rules())
    reported = migrate_source(code.encode(), catalog, frozenset({Applicability.safe}))
    assert [f.rule.code for f in reported.findings] == ["NPU806", "NPU920"]
    applied = migrate_source(code.encode(), catalog, UNSAFE)
    assert [f.rule.code for f in applied.findings] == ["NPU920"], "the flash_attn import is gone, not left"
    assert applied.removed_imports == [(2, "flash_attn.flash_attn_func")]


# Attention modules in the forms real projects write them over several statements (statements
# rules): the class, its input shape, and what the rewrite must write.
ATTENTION_MODULES = {
    "NPU947-timm-convit-mhsa": (
        "class Net(torch.nn.Module):\n"
        "    def __init__(self, dim=32, num_heads=4, attn_drop=0.0):\n"
        "        super().__init__()\n"
        "        self.num_heads = num_heads\n"
        "        self.scale = (dim // num_heads) ** -0.5\n"
        "        self.qkv = torch.nn.Linear(dim, dim * 3)\n"
        "        self.attn_drop = torch.nn.Dropout(attn_drop)\n"
        "        self.proj = torch.nn.Linear(dim, dim)\n\n"
        "    def forward(self, x):\n"
        "        B, N, C = x.shape\n"
        "        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads)"
        ".permute(2, 0, 3, 1, 4)\n"
        "        q, k, v = qkv.unbind(0)\n\n"
        "        attn = (q @ k.transpose(-2, -1)) * self.scale\n"
        "        attn = attn.softmax(dim=-1)\n"
        "        attn = self.attn_drop(attn)\n\n"
        "        x = (attn @ v).transpose(1, 2).reshape(B, N, C)\n"
        "        return self.proj(x)\n",
        "keep_prob=1.0 - self.attn_drop.p if self.attn_drop.training else 1.0)[0]",
    ),
    "NPU947-dino-qkv-indexed": (
        "class Net(torch.nn.Module):\n"
        "    def __init__(self, dim=32, num_heads=2):\n"
        "        super().__init__()\n"
        "        self.num_heads = num_heads\n"
        "        self.scale = (dim // num_heads) ** -0.5\n"
        "        self.qkv = torch.nn.Linear(dim, dim * 3)\n"
        "        self.proj = torch.nn.Linear(dim, dim)\n\n"
        "    def forward(self, x):\n"
        "        B, N, C = x.shape\n"
        "        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads)"
        ".permute(2, 0, 3, 1, 4)\n"
        "        q, k, v = qkv[0], qkv[1], qkv[2]\n"
        "        attn = (q @ k.transpose(-2, -1)) * self.scale\n"
        "        attn = F.softmax(attn, dim=-1)\n"
        "        x = (attn @ v).transpose(1, 2).reshape(B, N, C)\n"
        "        return self.proj(x)\n",
        '"BNSD", scale=self.scale)[0]',
    ),
    "NPU948-timm-rot-attention-pool": (
        "class Net(torch.nn.Module):\n"
        "    def __init__(self, dim=32, num_heads=4):\n"
        "        super().__init__()\n"
        "        self.num_heads, self.head_dim = num_heads, dim // num_heads\n"
        "        self.scale = self.head_dim ** -0.5\n"
        "        self.qkv = torch.nn.Linear(dim, dim * 3)\n"
        "        self.attn_drop = torch.nn.Dropout(0.0)\n"
        "        self.fused_attn = False\n\n"
        "    def forward(self, x):\n"
        "        B, N, C = x.shape\n"
        "        x = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)\n"
        "        q, k, v = x.unbind(0)\n"
        "        q = torch.cat([q[:, :, :1, :], q[:, :, 1:, :].flip(-1)], dim=2).type_as(v)\n"
        "        if self.fused_attn:\n"
        "            x = F.scaled_dot_product_attention(q, k, v)\n"
        "        else:\n"
        "            q = q * self.scale\n"
        "            attn = q @ k.transpose(-2, -1)\n"
        "            attn = attn.softmax(dim=-1)\n"
        "            attn = self.attn_drop(attn)\n"
        "            x = attn @ v\n"
        "        return x.transpose(1, 2).reshape(B, N, -1)\n",
        '"BNSD", scale=self.scale, keep_prob=',
    ),
}
STATEMENTS_INDEX = RuleIndex([r for r in load_rules() if r.code in {"NPU947", "NPU948", "NPU949"}])


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("case", sorted(ATTENTION_MODULES))
def test_fused_statements_train_like_the_original(on_the_npu: dict[str, dict], case: str, dtype) -> None:
    """The module rewritten by a statements rule, on the emulated NPU, gives the original's
    forward and, over three SGD steps in training mode, the original's weights (in fp32 closely;
    in bf16 as close as the original's own bf16 run is to its fp32 one, doubled), its guard
    letting the fused operator run."""
    check(on_the_npu[f"{case}-{dtype_name(dtype)}"], case)
