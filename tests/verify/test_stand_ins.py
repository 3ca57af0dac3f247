"""The original side's stand-ins for CUDA-only libraries, held to the libraries' own references:
flash-attn's pure-torch `attention_ref`, `generate_qkv` and `bert_padding` from its published
sdist (pinned), across causal, local, soft-capped, grouped-query and variable-length cases."""

from __future__ import annotations

import ast
import importlib.util
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import sources

torch = pytest.importorskip("torch")
pytest.importorskip("einops")

from npu_migrate.verify import stand_ins  # noqa: E402
from npu_migrate.verify.stand_ins import flash, padding, rotary, versions  # noqa: E402


@pytest.fixture
def releases(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    chosen = stand_ins.choose([])
    monkeypatch.setattr(versions, "chosen", dict(chosen))
    return versions.chosen


def _module(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@pytest.fixture(scope="module")
def library() -> Iterator[types.SimpleNamespace]:
    """flash-attn 2.8.3's own references: testing.py over its own bert_padding (pure torch)."""
    root = sources.fetch(sources.FLASH_ATTN)
    their_padding = _module("flash_attn_reference_bert_padding", root / "bert_padding.py")
    package = types.ModuleType("flash_attn")
    package.bert_padding = their_padding  # type: ignore[attr-defined]
    saved = {name: sys.modules.get(name) for name in ("flash_attn", "flash_attn.bert_padding")}
    sys.modules.update({"flash_attn": package, "flash_attn.bert_padding": their_padding})
    try:
        testing = _module("flash_attn_reference_testing", root / "utils" / "testing.py")
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    rotary_source = (root / "layers" / "rotary.py").read_text()
    wanted = [
        node for node in ast.parse(rotary_source).body
        if isinstance(node, ast.FunctionDef) and node.name in ("rotate_half", "apply_rotary_emb_torch")
    ]  # fmt: skip
    namespace: dict[str, object] = {"torch": torch}
    exec("from einops import rearrange, repeat", namespace)
    exec(
        compile(ast.Module(body=wanted, type_ignores=[]), str(root / "layers" / "rotary.py"), "exec"),
        namespace,
    )
    yield types.SimpleNamespace(
        testing=testing, padding=their_padding, rotary=namespace["apply_rotary_emb_torch"]
    )


def _close(ours: torch.Tensor, reference: torch.Tensor, lowp: torch.Tensor) -> None:
    """flash-attn's own acceptance: at most twice the error of the reference run in low precision."""
    allowed = 2 * (lowp - reference).abs().max().item() + 1e-6
    assert (ours.float() - reference.float()).abs().max().item() <= allowed


CASES = {  # seqlen_q, seqlen_k, heads, key heads, causal, window, softcap
    "plain": (64, 64, 4, 4, False, (-1, -1), 0.0),
    "causal more keys": (33, 71, 4, 4, True, (-1, -1), 0.0),
    "causal more queries": (71, 33, 4, 2, True, (-1, -1), 0.0),
    "local": (64, 80, 4, 1, False, (10, 5), 0.0),
    "local causal": (80, 64, 6, 3, True, (16, -1), 0.0),
    "softcap": (40, 40, 2, 2, False, (-1, -1), 30.0),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_flash_attn_func_matches_the_librarys_reference(library, releases, case: str, dtype: str) -> None:
    sq, sk, heads, key_heads, causal, window, softcap = CASES[case]
    torch.manual_seed(0)
    kind = getattr(torch, dtype)
    q = torch.randn(2, sq, heads, 32, dtype=kind)
    k, v = (torch.randn(2, sk, key_heads, 32, dtype=kind) for _ in range(2))
    ours = flash.flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap)
    limits = tuple(None if w < 0 else w for w in window)
    ref, _ = library.testing.attention_ref(q, k, v, causal=causal, window_size=limits, softcap=softcap)
    lowp, _ = library.testing.attention_ref(
        q, k, v, causal=causal, window_size=limits, softcap=softcap, upcast=False, reorder_ops=True
    )
    _close(ours, ref, lowp)
    qkv = flash.flash_attn_qkvpacked_func(torch.stack((q, q, q), 2), causal=causal, window_size=window)
    ref_self, _ = library.testing.attention_ref(q, q, q, causal=causal, window_size=limits)
    lowp_self, _ = library.testing.attention_ref(q, q, q, causal=causal, window_size=limits, upcast=False)
    _close(qkv, ref_self, lowp_self)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attn_varlen_func_matches_the_reference_on_padded_batches(
    library, releases, causal: bool
) -> None:
    torch.manual_seed(1)
    q = torch.randn(4, 48, 4, 16, dtype=torch.bfloat16)
    k, v = (torch.randn(4, 56, 2, 16, dtype=torch.bfloat16) for _ in range(2))
    query_mask = library.testing.generate_random_padding_mask(48, 4, "cpu", mode="random")
    key_mask = library.testing.generate_random_padding_mask(56, 4, "cpu", mode="third")
    packed = library.testing.generate_qkv(q, k, v, query_mask, key_mask)
    q_rows, k_rows, v_rows, _, cu_q, cu_k, _, _, max_q, max_k = packed[:10]
    rows = flash.flash_attn_varlen_func(q_rows, k_rows, v_rows, cu_q, cu_k, max_q, max_k, causal=causal)
    ours = packed[14](rows)  # their output_pad_fn
    ref, _ = library.testing.attention_ref(q, k, v, query_mask, key_mask, causal=causal)
    lowp, _ = library.testing.attention_ref(q, k, v, query_mask, key_mask, causal=causal, upcast=False)
    _close(ours, ref, lowp)


def test_alibi_adds_the_documented_distance_bias(library, releases) -> None:
    """-slope * |i + sk - sq - j|, per head, as the reference adds any attn_bias."""
    torch.manual_seed(2)
    q = torch.randn(1, 20, 2, 16, dtype=torch.float16)
    k, v = (torch.randn(1, 30, 2, 16, dtype=torch.float16) for _ in range(2))
    slopes = torch.tensor([0.5, 0.125])
    i, j = torch.arange(20).view(-1, 1), torch.arange(30)
    bias = -slopes.view(1, 2, 1, 1) * (i + 30 - 20 - j).abs()
    ref, _ = library.testing.attention_ref(q, k, v, attn_bias=bias, causal=True)
    lowp, _ = library.testing.attention_ref(q, k, v, attn_bias=bias, causal=True, upcast=False)
    _close(flash.flash_attn_func(q, k, v, causal=True, alibi_slopes=slopes), ref, lowp)


def test_the_kernels_refusals_are_kept(releases) -> None:
    q = torch.randn(1, 4, 2, 16)
    with pytest.raises(RuntimeError, match="only support fp16 and bf16"):
        flash.flash_attn_func(q, q, q)
    big = torch.randn(1, 4, 2, 264, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="head dimension at most 256"):
        flash.flash_attn_func(big, big, big)
    q3 = torch.randn(1, 4, 3, 16, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="must divide"):
        flash.flash_attn_func(q3, q3[:, :, :2], q3[:, :, :2])


def test_the_release_decides_the_apis_that_changed(releases) -> None:
    """Causal alignment (top-left before 2.1), unpad_input's arity (five from 2.7) and what
    FlashAttention 3 returns ((out, lse) in its betas, out from 3.0.0)."""
    q = torch.randn(1, 2, 1, 8, dtype=torch.bfloat16)
    k = torch.randn(1, 4, 1, 8, dtype=torch.bfloat16)
    v = torch.arange(4, dtype=torch.bfloat16).view(1, 4, 1, 1).expand(1, 4, 1, 8).contiguous()
    bottom_right = flash.flash_attn_func(q, k, v, causal=True)
    assert bottom_right[0, 1, 0, 0] > 1  # the last query reads all four keys
    releases["flash_attn"] = "2.0.9"
    top_left = flash.flash_attn_func(q, k, v, causal=True)
    assert top_left[0, 0, 0, 0] == 0 and top_left[0, 1, 0, 0] <= 1  # queries read keys 0 and 0..1
    mask = torch.tensor([[1, 1, 0]])
    assert len(padding.unpad_input(torch.randn(1, 3, 4), mask)) == 4
    releases["flash_attn"] = "2.8.3"
    assert len(padding.unpad_input(torch.randn(1, 3, 4), mask)) == 5
    assert isinstance(flash.flash_attn_3_results(q, q, False), tuple)
    releases["flash_attn_interface"] = "3.0.0"
    assert flash.flash_attn_3_results(q, q, False) is q


def test_bert_padding_matches_the_librarys(library, releases) -> None:
    torch.manual_seed(3)
    hidden = torch.randn(3, 10, 4)
    mask = library.testing.generate_random_padding_mask(10, 3, "cpu", mode="third")
    ours, theirs = padding.unpad_input(hidden, mask), library.padding.unpad_input(hidden, mask)
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(torch.as_tensor(a), torch.as_tensor(b))
    assert torch.equal(
        padding.pad_input(ours[0], ours[1], 3, 10), library.padding.pad_input(theirs[0], theirs[1], 3, 10)
    )
    lengths = torch.tensor([[2, 3, 0, 0, 0, 0], [6, 0, 0, 0, 0, 0]])
    packed = torch.randn(2, 6, 4)
    ours = padding.unpad_input_for_concatenated_sequences(packed, lengths)
    theirs = library.padding.unpad_input_for_concatenated_sequences(packed, lengths)
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(torch.as_tensor(a), torch.as_tensor(b))


@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_matches_the_librarys_torch_reference(library, interleaved: bool) -> None:
    torch.manual_seed(4)
    x = torch.randn(2, 12, 3, 32)
    angles = torch.randn(12, 12)
    cos, sin = angles.cos(), angles.sin()
    ours = rotary.apply_rotary_emb(x, cos, sin, interleaved=interleaved)
    assert torch.allclose(ours, library.rotary(x, cos, sin, interleaved), atol=1e-6)
    cu = torch.tensor([0, 5, 12], dtype=torch.int32)
    rows = x[0]
    packed = rotary.apply_rotary_emb(rows, cos, sin, interleaved=interleaved, cu_seqlens=cu, max_seqlen=7)
    expected = torch.cat([
        library.rotary(rows[None, :5], cos[:5], sin[:5], interleaved)[0],
        library.rotary(rows[None, 5:], cos[:7], sin[:7], interleaved)[0],
    ])  # fmt: skip
    assert torch.allclose(packed, expected, atol=1e-6)


def test_stand_ins_are_chosen_by_name_and_release() -> None:
    assert stand_ins.choose(["flash-attn==2.5.8", "xformers"]) == {
        "flash_attn": "2.5.8",
        "xformers": "0.0.29",
    }
    assert stand_ins.choose(["none"]) == {}
    with pytest.raises(stand_ins.StandInError, match="no stand-in for 'flashattn'"):
        stand_ins.choose(["flashattn"])
    with pytest.raises(stand_ins.StandInError, match="not a release number"):
        stand_ins.choose(["flash_attn==two"])


def _functions(path: Path, names: tuple[str, ...], namespace: dict[str, object]) -> dict[str, object]:
    """Some top-level functions of a library's file, run on their own (the file's imports need
    the CUDA build)."""
    wanted = [
        n for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef) and n.name in names
    ]
    exec(compile(ast.Module(body=wanted, type_ignores=[]), str(path), "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def xformers_library() -> types.SimpleNamespace:
    """xformers 0.0.29's attn_bias module (pure torch) and its reference attention."""
    root = sources.fetch(sources.XFORMERS)
    bias = _module("xformers_reference_attn_bias", root / "ops" / "fmha" / "attn_bias.py")
    namespace: dict[str, object] = {
        "torch": torch, "fmha": types.SimpleNamespace(attn_bias=bias),
        "AttentionBias": bias.AttentionBias, "AttentionBiasSubTensor": bias.AttentionBiasSubTensor,
    }  # fmt: skip
    _functions(root / "attn_bias_utils.py", ("ref_attention", "ref_attention_bmhk"), namespace)
    return types.SimpleNamespace(bias=bias, attention=namespace["ref_attention_bmhk"])


def _biases(module: types.ModuleType) -> dict[str, object]:
    """The same masks built through one attn_bias module's API (ours or the library's)."""
    block = module.BlockDiagonalMask.from_seqlens([3, 5, 4], [4, 6, 5])
    same = module.BlockDiagonalMask.from_seqlens([3, 5, 4])
    return {
        "causal": module.LowerTriangularMask(),
        "causal plus tensor": module.LowerTriangularMask().add_bias(
            torch.linspace(-1, 1, 12 * 12).view(12, 12)
        ),
        "causal from bottom right": module.LowerTriangularFromBottomRightMask(),
        "bottom right local": module.LowerTriangularFromBottomRightMask().make_local_attention(3),
        "local window": module.LocalAttentionFromBottomRightMask(window_left=2, window_right=1),
        "block diagonal": block,
        "block diagonal causal": same.make_causal(),
        "block causal from bottom right": block.make_causal_from_bottomright(),
        "block local": same.make_local_attention(2),
        "block local from bottom right": block.make_local_attention_from_bottomright(2),
    }


BIASES = (
    "causal", "causal plus tensor", "causal from bottom right", "bottom right local", "local window",
    "block diagonal", "block diagonal causal", "block causal from bottom right", "block local",
    "block local from bottom right",
)  # fmt: skip


@pytest.mark.parametrize("name", BIASES)
def test_xformers_biases_and_attention_match_the_librarys(xformers_library, name: str) -> None:
    from npu_migrate.verify.stand_ins import xformers_bias, xformers_ops

    ours, theirs = _biases(xformers_bias)[name], _biases(xformers_library.bias)[name]
    packed_keys = getattr(theirs, "k_seqinfo", None)
    queries, keys = 12, packed_keys.seqstart_py[-1] if packed_keys else 12
    shape = (1, 2, queries, keys)
    assert torch.equal(ours.materialize(shape), theirs.materialize(shape))
    torch.manual_seed(5)
    q = torch.randn(1, queries, 2, 16, dtype=torch.float16)
    k, v = (torch.randn(1, keys, 2, 16, dtype=torch.float16) for _ in range(2))
    expected = xformers_library.attention(q, k, v, theirs).nan_to_num(0.0)
    got = xformers_ops.memory_efficient_attention(q, k, v, attn_bias=ours)
    assert got.dtype == torch.float16
    assert torch.allclose(got.float(), expected.float(), atol=2e-3, rtol=1e-3)


def test_xformers_refuses_what_the_library_refuses() -> None:
    from npu_migrate.verify.stand_ins import xformers_bias

    block = xformers_bias.BlockDiagonalMask.from_seqlens([3, 5], [4, 2])
    with pytest.raises(ValueError, match="Expected `num_keys >= num_queries`"):
        block.make_causal_from_bottomright()
    with pytest.raises(ValueError, match="window_size > 0"):
        xformers_bias.LowerTriangularFromBottomRightMask().make_local_attention(0)


def _trained(make_optimizer, steps: int = 3) -> list[torch.Tensor]:
    torch.manual_seed(6)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    optimizer = make_optimizer(model.parameters())
    data = torch.randn(32, 8)
    for _ in range(steps):
        optimizer.zero_grad()
        model(data).pow(2).mean().backward()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize(
    ("ours", "torchs"),
    [  # apex's own tests (tests/L0/run_optimizers) hold FusedAdam to torch's Adam and AdamW
        (
            {"adam_w_mode": True, "weight_decay": 0.1},
            lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1),
        ),
        (
            {"adam_w_mode": False, "weight_decay": 0.1},
            lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=0.1),
        ),
    ],
)
def test_apex_fused_adam_updates_as_torch_does(ours: dict, torchs) -> None:
    from npu_migrate.verify.stand_ins.optimizers import FusedAdam

    got = _trained(lambda p: FusedAdam(p, lr=1e-2, **ours))
    for a, b in zip(got, _trained(torchs), strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_apex_fused_sgd_updates_as_torch_does_and_refusals_are_kept() -> None:
    from npu_migrate.verify.stand_ins.optimizers import FusedAdam, FusedLAMB, FusedSGD

    got = _trained(lambda p: FusedSGD(p, lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True))
    expected = _trained(lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True))
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
    after = _trained(lambda p: FusedSGD(p, lr=0.1, momentum=0.9, weight_decay=0.01, wd_after_momentum=True))
    assert not all(torch.equal(a, b) for a, b in zip(after, expected, strict=True))
    with pytest.raises(RuntimeError, match="does not support the AMSGrad variant"):
        FusedAdam([torch.nn.Parameter(torch.ones(1))], amsgrad=True)
    with pytest.raises(NotImplementedError, match="no FusedLAMB"):
        FusedLAMB([torch.nn.Parameter(torch.ones(1))])


def test_apex_norms_compute_in_float32_and_keep_the_documented_dtypes() -> None:
    from npu_migrate.verify.stand_ins import norms

    torch.manual_seed(7)
    x = torch.randn(3, 5, 16, dtype=torch.bfloat16)
    layer = norms.FusedLayerNorm(16)
    torch.nn.init.normal_(layer.weight)
    expected = torch.nn.functional.layer_norm(x.float(), (16,), layer.weight, layer.bias).to(torch.bfloat16)
    assert torch.equal(layer(x), expected)
    rms = norms.FusedRMSNorm(16, eps=1e-6)
    torch.nn.init.normal_(rms.weight)
    expected = torch.nn.functional.rms_norm(x.float(), (16,), rms.weight, eps=1e-6)
    assert torch.allclose(rms(x).float(), expected, rtol=8e-3, atol=1e-3) and rms(x).dtype == torch.bfloat16
    mixed = norms.MixedFusedRMSNorm(16)
    assert mixed(x).dtype == torch.float32  # the weight's dtype
    with pytest.raises(RuntimeError, match="does not support `elementwise_affine = False`"):
        norms.MixedFusedRMSNorm(16, elementwise_affine=False)


def test_transformer_engine_modules_hold_its_parameter_names_and_semantics() -> None:
    """The state_dict keys TE checkpoints hold (Megatron's TE spec loads them by name), RMSNorm
    with a zero-centred gamma, a SwiGLU MLP gating the first half of fc1 with the second."""
    from npu_migrate.verify.stand_ins import te

    torch.manual_seed(8)
    x = torch.randn(5, 2, 16)
    linear = te.LayerNormLinear(16, 24, normalization="RMSNorm", zero_centered_gamma=True, return_bias=True)
    assert list(linear.state_dict()) == ["layer_norm_weight", "weight", "bias"]
    torch.nn.init.normal_(linear.layer_norm_weight, std=0.1)
    torch.nn.init.normal_(linear.bias)
    out, bias = linear(x)
    normed = torch.nn.functional.rms_norm(x, (16,), linear.layer_norm_weight + 1, eps=1e-5)
    assert torch.allclose(out, normed @ linear.weight.T, atol=1e-5) and bias is linear.bias
    mlp = te.LayerNormMLP(16, 32, activation="swiglu")
    assert list(mlp.state_dict()) == [
        "layer_norm_weight", "layer_norm_bias", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias",
    ]  # fmt: skip
    assert mlp.fc1_weight.shape == (64, 16)
    gate, up = torch.nn.functional.linear(
        torch.nn.functional.layer_norm(x, (16,), mlp.layer_norm_weight, mlp.layer_norm_bias),
        mlp.fc1_weight,
        mlp.fc1_bias,
    ).chunk(2, -1)
    expected = torch.nn.functional.linear(torch.nn.functional.silu(gate) * up, mlp.fc2_weight, mlp.fc2_bias)
    assert torch.allclose(mlp(x), expected, atol=1e-5)
    with pytest.raises(NotImplementedError, match="one tensor-parallel rank"):
        te.Linear(16, 16, tp_size=2)


def test_transformer_engine_grouped_linear_tracker_and_fp8_types_megatron_imports() -> None:
    """What megatron-core 0.12.1 imports from TE at module level once TE imports (its
    extensions subclass GroupedLinear and the RNG tracker; fp8_utils asks for QuantizedTensor):
    GroupedLinear computes each row block with its own weight (`weight0`, `weight1`...), the
    tracker forks into a named stream and back, and the FP8 tensor types exist but FP8 is not
    emulated."""
    from npu_migrate.verify.stand_ins import te

    torch.manual_seed(11)
    grouped = te.GroupedLinear(3, 8, 4, return_bias=True)
    assert list(grouped.state_dict()) == ["weight0", "bias0", "weight1", "bias1", "weight2", "bias2"]
    x = torch.randn(7, 8)
    out, biases = grouped(x, [2, 0, 5])
    expected = torch.cat([x[:2] @ grouped.weight0.T, x[2:] @ grouped.weight2.T])
    assert torch.allclose(out, expected) and len(biases) == 3
    with pytest.raises(ValueError, match="Number of splits should match number of GEMMs"):
        grouped(x, [7])
    tracker = te.CudaRNGStatesTracker()
    tracker.add("model-parallel-rng", 123)
    torch.manual_seed(5)
    outside = torch.rand(3)
    torch.manual_seed(5)
    with tracker.fork():
        inside = torch.rand(2)
    assert torch.equal(torch.rand(3), outside)  # the default stream goes on as if no fork
    torch.manual_seed(123)
    assert torch.equal(inside, torch.rand(2))  # the tracker's stream, seeded 123
    with pytest.raises(Exception, match="is not added"), tracker.fork("other"):
        pass
    assert issubclass(te.Float8Tensor, te.QuantizedTensor)
    with pytest.raises(NotImplementedError, match="FP8 is not emulated"):
        te.replace_raw_data(torch.empty(1), torch.empty(1))


def test_transformer_engine_attention_formats_and_masks_match_sdpa() -> None:
    """sbhd causal, bshd with a padding mask (True: masked out), thd packed: each as SDPA
    computes it on [b, h, s, d] with the mask's complement."""
    from npu_migrate.verify.stand_ins import te

    torch.manual_seed(9)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q, k, v = (torch.randn(2, 4, 6, 8) for _ in range(3))  # [b, h, s, d]
    causal = te.DotProductAttention(4, 8, qkv_format="sbhd", attn_mask_type="causal")
    got = causal(*(t.permute(2, 0, 1, 3) for t in (q, k, v)))
    assert got.shape == (6, 2, 32)
    assert torch.allclose(got, sdpa(q, k, v, is_causal=True).permute(2, 0, 1, 3).flatten(-2), atol=1e-6)
    padded = torch.tensor([[False] * 6, [False] * 4 + [True] * 2]).view(2, 1, 1, 6)
    padding = te.DotProductAttention(4, 8, qkv_format="bshd", attn_mask_type="padding")
    got = padding(*(t.transpose(1, 2) for t in (q, k, v)), attention_mask=padded)
    assert torch.allclose(got, sdpa(q, k, v, attn_mask=~padded).transpose(1, 2).flatten(-2), atol=1e-6)
    cu = torch.tensor([0, 6, 12], dtype=torch.int32)
    packed = te.DotProductAttention(4, 8, qkv_format="thd", attn_mask_type="padding_causal")
    rows = [t.permute(0, 2, 1, 3).flatten(0, 1) for t in (q, k, v)]  # [b s, h, d]
    got = packed(*rows, cu_seqlens_q=cu, cu_seqlens_kv=cu)
    assert torch.allclose(
        got, sdpa(q, k, v, is_causal=True).transpose(1, 2).flatten(0, 1).flatten(-2), atol=1e-6
    )


def test_autocast_does_not_reach_inside_the_attention_kernel(releases) -> None:
    """Under CPU autocast the stand-in's float32 math stays float32, as a kernel's does: the same
    output as outside it (HunyuanVideo runs its DiT under bf16 autocast)."""
    torch.manual_seed(10)
    q, k, v = (torch.randn(2, 16, 4, 32, dtype=torch.bfloat16) for _ in range(3))
    outside = flash.flash_attn_func(q, k, v, causal=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = flash.flash_attn_func(q, k, v, causal=True)
    assert torch.equal(inside, outside)


def test_cuda_devices_named_by_the_tree_run_on_the_sides_device() -> None:
    from npu_migrate.verify.stand_ins.cuda_devices import CudaDevices

    with CudaDevices(Path(__file__).parent, "cpu") as devices:
        lengths = torch.zeros(3, dtype=torch.int32, device="cuda")
        moved = torch.ones(2).cuda().to(torch.device("cuda", 0))
        kept = torch.ones(2).to("cpu")
    assert lengths.device.type == moved.device.type == kept.device.type == "cpu"
    site = "test_stand_ins.py:test_cuda_devices_named_by_the_tree_run_on_the_sides_device"
    assert devices.described() == [f"{site}: 3 call(s) on cuda run on cpu"]


def test_the_current_cuda_device_index_names_the_sides_device() -> None:
    """Megatron's `.to(device=torch.cuda.current_device())`: the index is 0 and the integer
    device it names is the side's; outside the mode torch.cuda is torch's again."""
    from npu_migrate.verify.stand_ins.cuda_devices import CudaDevices

    with CudaDevices(Path(__file__).parent, "cpu") as devices:
        index = torch.cuda.current_device()
        moved = torch.ones(2).to(device=index)
        positional = torch.ones(2).to(index)
        made = torch.zeros(2, device=0)
    assert index == 0 and moved.device.type == positional.device.type == made.device.type == "cpu"
    site = "test_stand_ins.py:test_the_current_cuda_device_index_names_the_sides_device"
    assert devices.described() == [f"{site}: 4 call(s) on cuda run on cpu"]
    if not torch.cuda.is_available():
        with pytest.raises((AssertionError, RuntimeError)):
            torch.cuda.current_device()
