"""Numerical tests of the torch_npu operator emulations against independent PyTorch references."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from npu_migrate.emulation import ops
from npu_migrate.emulation.ops import (
    fast_gelu,
    npu_fusion_attention,
    npu_geglu,
    npu_rms_norm,
    npu_rotary_mul,
    npu_swiglu,
)

DTYPES = [torch.float32, torch.bfloat16]
COMPRESSED_MASK = torch.triu(torch.ones(2048, 2048), 1).bool()


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    """Tolerance relative to the magnitude of ``expected``: 1e-4 in float32, 2e-2 in bfloat16."""
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    expected = expected.detach().float()
    magnitude = max(expected.abs().max().item(), 1.0)
    torch.testing.assert_close(actual.detach().float(), expected, atol=tol * magnitude, rtol=tol)


def check_forward_backward(
    ours: Callable[..., torch.Tensor],
    reference: Callable[..., torch.Tensor],
    inputs: list[torch.Tensor],
    dtype: torch.dtype,
) -> None:
    """Run ``ours`` on ``inputs`` in ``dtype`` and ``reference`` on the same values in float32; compare
    outputs and the gradients of every input."""
    ours_in = [t.detach().to(dtype).requires_grad_() for t in inputs]
    ref_in = [t.detach().float().requires_grad_() for t in ours_in]
    out, expected = ours(*ours_in), reference(*ref_in)
    assert out.dtype == dtype
    assert out.shape == expected.shape
    assert_close(out, expected, dtype)
    grad = torch.randn(expected.shape).to(dtype)
    out.backward(grad)
    expected.backward(grad.float())
    for got, want in zip(ours_in, ref_in, strict=True):
        assert_close(got.grad, want.grad, dtype)


# ----------------------------------------------------------------------------------------------------------
# npu_fusion_attention
# ----------------------------------------------------------------------------------------------------------

B, N, S, D = 2, 4, 6, 8
SCALE = 1 / math.sqrt(D)


def to_layout(x: torch.Tensor, layout: str) -> torch.Tensor:
    """(B, N, S, D) -> the given layout."""
    batch, heads, seq, dim = x.shape
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.transpose(1, 2)
    if layout == "BSH":
        return x.transpose(1, 2).reshape(batch, seq, heads * dim)
    assert layout == "SBH"
    return x.permute(2, 0, 1, 3).reshape(seq, batch, heads * dim)


def sdpa(q, k, v, keep=None, **kwargs) -> torch.Tensor:
    """SDPA with the attention scale of the tests; ``keep`` is a boolean mask, True = attend."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=SCALE, enable_gqa=True, **kwargs)


def qkv(sq: int = S, skv: int = S, n_kv: int = N, dim_v: int = D) -> list[torch.Tensor]:
    return [torch.randn(B, N, sq, D), torch.randn(B, n_kv, skv, D), torch.randn(B, n_kv, skv, dim_v)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["BNSD", "BSND", "BSH", "SBH"])
@pytest.mark.parametrize("n_kv", [N, 2, 1])
def test_attention_layouts_and_gqa_match_sdpa(layout: str, n_kv: int, dtype: torch.dtype) -> None:
    def ours(q, k, v):
        t = [to_layout(x, layout) for x in (q, k, v)]
        out = npu_fusion_attention(*t, head_num=N, input_layout=layout, scale=SCALE)
        return out[0]

    check_forward_backward(ours, lambda q, k, v: to_layout(sdpa(q, k, v), layout), qkv(n_kv=n_kv), dtype)


def test_attention_value_head_dim_may_be_smaller() -> None:
    def ours(q, k, v):
        return npu_fusion_attention(*(to_layout(x, "BSH") for x in (q, k, v)), N, "BSH", scale=SCALE)[0]

    check_forward_backward(ours, lambda q, k, v: to_layout(sdpa(q, k, v), "BSH"), qkv(dim_v=4), torch.float32)


def random_keep(*shape: int) -> torch.Tensor:
    """Random boolean keep-mask (True = attend) with every row keeping its first key."""
    keep = torch.rand(*shape) > 0.4
    keep[..., 0] = True
    return keep


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask_shape", [(B, N, S, S), (B, 1, S, S), (1, 1, S, S), (S, S)])
@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.uint8])
def test_attention_mask_true_means_excluded(mask_shape, mask_dtype, dtype) -> None:
    keep = random_keep(*mask_shape)
    npu_mask = (~keep).to(mask_dtype)

    def ours(q, k, v):
        return npu_fusion_attention(q, k, v, N, "BNSD", atten_mask=npu_mask, scale=SCALE)[0]

    check_forward_backward(ours, lambda q, k, v: sdpa(q, k, v, keep), qkv(), dtype)


def causal_keep(sq: int, skv: int, bottom_right: bool) -> torch.Tensor:
    return torch.ones(sq, skv, dtype=torch.bool).tril(skv - sq if bottom_right else 0)


def sdpa_with_empty_rows(q, k, v, keep) -> torch.Tensor:
    """SDPA where leading fully masked query rows give 0 (what the NPU kernel returns for them)."""
    empty = int((~keep.any(-1)).sum())
    rows = sdpa(q[:, :, empty:], k, v, keep[empty:])
    return torch.cat([rows.new_zeros(*rows.shape[:2], empty, v.shape[-1]), rows], dim=2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sparse_mode", [2, 3])
@pytest.mark.parametrize(("sq", "skv"), [(6, 6), (4, 7), (7, 4)])
def test_attention_causal_sparse_modes(sparse_mode: int, sq: int, skv: int, dtype: torch.dtype) -> None:
    keep = causal_keep(sq, skv, bottom_right=sparse_mode == 3)

    def ours(q, k, v):
        return npu_fusion_attention(
            q, k, v, N, "BNSD", atten_mask=COMPRESSED_MASK, scale=SCALE, sparse_mode=sparse_mode
        )[0]

    check_forward_backward(ours, lambda q, k, v: sdpa_with_empty_rows(q, k, v, keep), qkv(sq, skv), dtype)


def test_attention_leftup_causal_equals_sdpa_is_causal() -> None:
    q, k, v = qkv(4, 7, n_kv=2)
    out = npu_fusion_attention(q, k, v, N, "BNSD", atten_mask=COMPRESSED_MASK, scale=SCALE, sparse_mode=2)[0]
    assert_close(out, sdpa(q, k, v, is_causal=True), torch.float32)


def test_attention_sparse_mode_0_with_causal_mask_and_tokens_like_the_doc_example() -> None:
    q, k, v = qkv()
    mask = torch.triu(torch.ones(S, S), 1).bool()
    out = npu_fusion_attention(
        q, k, v, N, "BNSD", atten_mask=mask, scale=SCALE, pre_tockens=65536, next_tockens=0
    )
    assert_close(out[0], sdpa(q, k, v, is_causal=True), torch.float32)


def band_keep(sq: int, skv: int, pre: int, nxt: int, shift: int) -> torch.Tensor:
    offset = torch.arange(skv)[None, :] - torch.arange(sq)[:, None] - shift
    return (offset >= -pre) & (offset <= nxt)


@pytest.mark.parametrize(("pre", "nxt"), [(1, 1), (2, 0), (3, -1)])
def test_attention_band_sparse_mode_0_limits_a_given_mask(pre: int, nxt: int) -> None:
    q, k, v = qkv()
    no_mask = torch.zeros(S, S, dtype=torch.bool)
    out = npu_fusion_attention(
        q, k, v, N, "BNSD", atten_mask=no_mask, scale=SCALE, pre_tockens=pre, next_tockens=nxt
    )[0]
    assert_close(out, sdpa_with_empty_rows(q, k, v, band_keep(S, S, pre, nxt, 0)), torch.float32)


def test_attention_band_sparse_mode_4_counts_from_bottom_right() -> None:
    q, k, v = qkv(4, 7)
    out = npu_fusion_attention(
        q,
        k,
        v,
        N,
        "BNSD",
        atten_mask=COMPRESSED_MASK,
        scale=SCALE,
        sparse_mode=4,
        pre_tockens=2,
        next_tockens=1,
    )[0]
    assert_close(out, sdpa(q, k, v, band_keep(4, 7, 2, 1, 7 - 4)), torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pse_shape", [(B, N, S, S), (B, N, 1, S), (1, N, S, S)])
def test_attention_pse_is_added_before_scaling(pse_shape, dtype) -> None:
    def ours(q, k, v, pse):
        return npu_fusion_attention(q, k, v, N, "BNSD", pse=pse, scale=SCALE)[0]

    def reference(q, k, v, pse):  # softmax(scale * (QK^T + pse)) V, with SDPA's additive float mask
        return F.scaled_dot_product_attention(q, k, v, attn_mask=SCALE * pse, scale=SCALE)

    check_forward_backward(ours, reference, [*qkv(), torch.randn(pse_shape)], dtype)


def test_attention_default_scale_is_one() -> None:
    q, k, v = qkv()
    out = npu_fusion_attention(q, k, v, N, "BNSD")[0]
    assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=1.0), torch.float32)


def test_attention_softmax_statistics() -> None:
    q, k, v = qkv()
    _, softmax_max, softmax_sum, softmax_out, seed, offset, numels = npu_fusion_attention(
        q, k, v, N, "BNSD", scale=SCALE
    )
    assert softmax_max.shape == softmax_sum.shape == (B, N, S, 8)
    assert softmax_max.dtype == softmax_sum.dtype == torch.float32
    logits = SCALE * q @ k.transpose(-2, -1)
    lse = softmax_max[..., 0] + softmax_sum[..., 0].log()
    assert_close(lse, logits.logsumexp(-1), torch.float32)
    assert softmax_out.numel() == 0
    assert (seed, offset, numels) == (0, 0, 0)


def tnd(x: torch.Tensor) -> torch.Tensor:
    """(1, N, T, D) -> (T, N, D)."""
    return x[0].transpose(0, 1)


def varlen_reference(q, k, v, q_lens, kv_lens, keep_fn) -> torch.Tensor:
    """Per-sequence SDPA on (1, N, T, D) tensors; tokens after the last sequence give 0."""
    rows, q_start, kv_start = [], 0, 0
    for sq, skv in zip(q_lens, kv_lens, strict=True):
        q_end, kv_end = q_start + sq, kv_start + skv
        if sq:
            seq_q, seq_k, seq_v = q[:, :, q_start:q_end], k[:, :, kv_start:kv_end], v[:, :, kv_start:kv_end]
            rows.append(sdpa(seq_q, seq_k, seq_v, keep_fn(sq, skv)))
        q_start, kv_start = q_end, kv_end
    rows.append(q.new_zeros(1, q.shape[1], q.shape[2] - q_start, v.shape[-1]))
    return torch.cat(rows, dim=2)


def cumulative(lengths: list[int]) -> list[int]:
    return list(torch.tensor(lengths).cumsum(0).tolist())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sparse_mode", [None, 2, 3])
def test_attention_tnd_matches_per_sequence_sdpa(sparse_mode: int | None, dtype: torch.dtype) -> None:
    q_lens, kv_lens = [3, 0, 5, 2], [4, 2, 5, 3]  # an empty query sequence; two padding tokens at the end
    inputs = [torch.randn(1, N, 12, D), torch.randn(1, 2, 14, D), torch.randn(1, 2, 14, D)]
    keep_fn = {None: lambda sq, skv: None, 2: lambda sq, skv: causal_keep(sq, skv, False)}.get(
        sparse_mode, lambda sq, skv: causal_keep(sq, skv, True)
    )

    def ours(q, k, v):
        out = npu_fusion_attention(
            tnd(q),
            tnd(k),
            tnd(v),
            N,
            "TND",
            scale=SCALE,
            atten_mask=None if sparse_mode is None else COMPRESSED_MASK,
            sparse_mode=sparse_mode or 0,
            actual_seq_qlen=cumulative(q_lens),
            actual_seq_kvlen=cumulative(kv_lens),
        )
        return out[0]

    def reference(q, k, v):
        return tnd(varlen_reference(q, k, v, q_lens, kv_lens, keep_fn))

    check_forward_backward(ours, reference, inputs, dtype)


def test_attention_tnd_mask_is_sliced_per_sequence_and_trailing_zeros_skip_batches() -> None:
    q_lens, kv_lens = [3, 4], [5, 2]
    keep = random_keep(4, 5)
    q, k, v = torch.randn(1, N, 7, D), torch.randn(1, N, 7, D), torch.randn(1, N, 7, D)
    out = npu_fusion_attention(
        tnd(q),
        tnd(k),
        tnd(v),
        N,
        "TND",
        atten_mask=~keep,
        scale=SCALE,
        actual_seq_qlen=[3, 7, 0, 0],
        actual_seq_kvlen=[5, 7, 0, 0],
    )[0]
    expected = varlen_reference(q, k, v, q_lens, kv_lens, lambda sq, skv: keep[:sq, :skv])
    assert_close(out, tnd(expected), torch.float32)


def test_attention_tnd_softmax_layout() -> None:
    t = 5
    q, k, v = torch.randn(t, N, D), torch.randn(t, N, D), torch.randn(t, N, D)
    lens = {"actual_seq_qlen": [2, 5], "actual_seq_kvlen": [2, 5]}
    default = npu_fusion_attention(q, k, v, N, "TND", **lens)
    tnd_layout = npu_fusion_attention(q, k, v, N, "TND", softmax_layout="TND", **lens)
    assert default[1].shape == tnd_layout[1].shape == (t, N, 8)
    # The default output is labelled TND but holds its data in NTD order (CANN docs).
    torch.testing.assert_close(default[1].reshape(N, t, 8).transpose(0, 1), tnd_layout[1])
    torch.testing.assert_close(default[0], tnd_layout[0])


def test_attention_dropout() -> None:
    q, k, _ = qkv(skv=64)
    v = torch.ones(B, N, 64, D)
    out, *_, seed, offset, numels = npu_fusion_attention(q, k, v, N, "BNSD", scale=SCALE, keep_prob=0.5)
    assert numels == B * N * S * 64
    assert isinstance(seed, int) and offset == 0
    assert abs(out.mean().item() - 1.0) < 0.05  # inverted dropout keeps the expectation
    assert not torch.allclose(out, torch.ones_like(out))
    torch.manual_seed(1)
    first = npu_fusion_attention(q, k, v, N, "BNSD", keep_prob=0.5)[0]
    torch.manual_seed(1)
    torch.testing.assert_close(npu_fusion_attention(q, k, v, N, "BNSD", keep_prob=0.5)[0], first)


def test_attention_sparse_mode_without_mask_is_full_attention_with_a_warning() -> None:
    q, k, v = qkv()
    with pytest.warns(UserWarning, match="no effect without atten_mask"):
        out = npu_fusion_attention(q, k, v, N, "BNSD", scale=SCALE, sparse_mode=2)[0]
    assert_close(out, sdpa(q, k, v), torch.float32)


def fa_call(**overrides) -> None:
    """npu_fusion_attention on valid BNSD inputs, with ``overrides`` applied."""
    q, k, v = qkv()
    args = {"query": q, "key": k, "value": v, "head_num": N, "input_layout": "BNSD", **overrides}
    npu_fusion_attention(**args)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"input_layout": "BHSD"}, "input_layout must be one of"),
        ({"input_layout": "BSH"}, "query must be 3-D for BSH"),
        ({"head_num": 8}, "head_num=8 does not match"),
        ({"key": torch.randn(B, 3, S, D), "value": torch.randn(B, 3, S, D)}, "multiple of key/value heads"),
        ({"value": torch.randn(B, N, S + 1, D)}, "same batch, head and sequence"),
        ({"value": torch.randn(B, N, S, D + 1)}, "Dq == Dk >= Dv"),
        (
            {
                "query": torch.randn(1, 1, 1, 769),
                "key": torch.randn(1, 1, 1, 769),
                "value": torch.randn(1, 1, 1, 769),
                "head_num": 1,
            },
            "head dim D must be in 1..768",
        ),
        ({"key": torch.randn(B, N, S, D).half()}, "dtypes must match"),
        ({"query": torch.ones(B, N, S, D, dtype=torch.int32)}, "query must be float16"),
        ({"padding_mask": torch.zeros(S, S)}, "padding_mask is not supported"),
        ({"keep_prob": 0.0}, r"keep_prob must be in \(0, 1\]"),
        ({"sparse_mode": 9}, "sparse_mode must be in 0..8"),
        ({"sparse_mode": 7}, "only supported with input_layout 'TND'"),
        ({"softmax_layout": "TND"}, "softmax_layout must be"),
        ({"atten_mask": torch.zeros(S, S)}, "atten_mask must be bool, uint8"),
        ({"atten_mask": torch.zeros(B, S, S, dtype=torch.bool)}, "BNSS, B1SS, 11SS or SS"),
        ({"atten_mask": torch.zeros(1, N, S, S, dtype=torch.bool)}, "BNSS, B1SS, 11SS or SS"),
        ({"atten_mask": COMPRESSED_MASK}, r"SS = \(6, 6\)"),
        ({"atten_mask": torch.triu(torch.ones(S, S), 1).bool(), "sparse_mode": 2}, "compressed mask"),
        ({"atten_mask": ~COMPRESSED_MASK, "sparse_mode": 3}, "compressed mask"),
        (
            {"atten_mask": torch.zeros(S, S, dtype=torch.bool), "pre_tockens": 1, "next_tockens": -3},
            "negative next_tockens",
        ),
        ({"pse": torch.zeros(B, N, S, S, dtype=torch.float16)}, "pse dtype"),
        ({"pse": torch.zeros(B, 1, S, S)}, "pse must be BNSS, BN1Skv or 1NSS"),
    ],
)
def test_attention_rejects_invalid_inputs(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fa_call(**overrides)


def test_a_compressed_mask_checked_once_is_checked_again_once_changed() -> None:
    """The check of the 2048x2048 mask is remembered per mask (it cost half a second at every
    layer of every step), but a mask changed in place, or another mask in the same storage
    seen through another view, is checked again."""
    mask = COMPRESSED_MASK.clone()
    fa_call(atten_mask=mask, sparse_mode=2)
    fa_call(atten_mask=mask, sparse_mode=2)
    mask[0, 5] = False
    with pytest.raises(ValueError, match="compressed mask"):
        fa_call(atten_mask=mask, sparse_mode=2)
    mask[0, 5] = True
    fa_call(atten_mask=mask, sparse_mode=2)
    with pytest.raises(ValueError, match="compressed mask"):
        fa_call(atten_mask=mask.t(), sparse_mode=2)


@pytest.mark.parametrize(
    ("layout", "overrides", "message"),
    [
        ("BSH", {"head_num": 3}, "not a multiple of head_num=3"),
        ("BSH", {"key": torch.randn(B, S, 12), "value": torch.randn(B, S, 12)}, "whole numbers of heads"),
        ("TND", {}, "needs actual_seq_qlen"),
        ("TND", {"actual_seq_qlen": [2, 9], "actual_seq_kvlen": [2, 6]}, "not exceeding the T axis"),
        ("TND", {"actual_seq_qlen": [4, 2], "actual_seq_kvlen": [4, 6]}, "non-decreasing"),
        ("TND", {"actual_seq_qlen": [6], "actual_seq_kvlen": [2, 6]}, "one entry per sequence"),
        ("TND", {"actual_seq_qlen": [6], "actual_seq_kvlen": [6], "sparse_mode": 5}, "sparse_mode=5"),
        (
            "TND",
            {"actual_seq_qlen": [6], "actual_seq_kvlen": [6], "atten_mask": torch.zeros(1, 1, S, S).bool()},
            "must be SS",
        ),
    ],
)
def test_attention_rejects_invalid_layout_arguments(layout: str, overrides: dict, message: str) -> None:
    q, k, v = qkv()
    tensors = (
        {name: to_layout(x, layout) for name, x in zip(("query", "key", "value"), (q, k, v), strict=True)}
        if layout != "TND"
        else {"query": torch.randn(S, N, D), "key": torch.randn(S, N, D), "value": torch.randn(S, N, D)}
    )
    with pytest.raises(ValueError, match=message):
        npu_fusion_attention(**{**tensors, "head_num": N, "input_layout": layout, **overrides})


def test_attention_reports_features_it_does_not_emulate() -> None:
    with pytest.raises(NotImplementedError, match="sparse_mode=6"):
        fa_call(atten_mask=COMPRESSED_MASK, sparse_mode=6)
    x = torch.randn(S, N, D)
    with pytest.raises(NotImplementedError, match="TND"):
        npu_fusion_attention(
            x, x, x, N, "TND", pse=torch.zeros(1, N, S, S), actual_seq_qlen=[S], actual_seq_kvlen=[S]
        )


# ----------------------------------------------------------------------------------------------------------
# npu_rms_norm
# ----------------------------------------------------------------------------------------------------------


def llama_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm.forward."""
    variance = x.float().pow(2).mean(-1, keepdim=True)
    return weight * (x.float() * torch.rsqrt(variance + eps)).to(x.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_matches_llama(dtype: torch.dtype) -> None:
    inputs = [torch.randn(3, 5, 16), 1 + 0.1 * torch.randn(16)]
    check_forward_backward(
        lambda x, w: npu_rms_norm(x, w, 1e-5)[0], lambda x, w: llama_rms_norm(x, w, 1e-5), inputs, dtype
    )


def test_rms_norm_rstd_and_multi_dim_gamma() -> None:
    x = torch.randn(4, 1, 16)
    y, rstd = npu_rms_norm(x, torch.ones(16))
    assert rstd.shape == (4, 1, 1) and rstd.dtype == torch.float32
    torch.testing.assert_close(rstd, torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    x16 = torch.randn(3, 4, 5).half()
    gamma = torch.randn(4, 5).half()
    y, rstd = npu_rms_norm(x16, gamma)
    assert y.dtype == torch.float16 and rstd.shape == (3, 1, 1)
    expected = (
        x16.float() * torch.rsqrt(x16.float().pow(2).mean((-2, -1), keepdim=True) + 1e-6) * gamma.float()
    )
    assert_close(y, expected, torch.bfloat16)


@pytest.mark.parametrize(
    ("x", "gamma", "message"),
    [
        (torch.randn(2, 8), torch.randn(8).half(), "gamma dtype must equal self dtype"),
        (torch.randn(2, 8), torch.randn(4), "trailing dimensions"),
        (torch.randn(2, 8), torch.randn(2, 2, 8), "trailing dimensions"),
        (torch.ones(2, 8, dtype=torch.int64), torch.ones(8, dtype=torch.int64), "self must be float16"),
        (torch.randn([1] * 9), torch.randn(1), "1 to 8 dimensions"),
    ],
)
def test_rms_norm_rejects_invalid_inputs(x, gamma, message) -> None:
    with pytest.raises(ValueError, match=message):
        npu_rms_norm(x, gamma)


# ----------------------------------------------------------------------------------------------------------
# npu_rotary_mul
# ----------------------------------------------------------------------------------------------------------


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """transformers' rotate_half."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def angles(seq: int, dim: int) -> torch.Tensor:
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
    return torch.outer(torch.arange(seq).float(), inv_freq)  # (S, D/2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["BNSD", "BSND"])
def test_rotary_half_matches_rotate_half(layout: str, dtype: torch.dtype) -> None:
    emb = torch.cat([angles(5, 8)] * 2, dim=-1)  # (S, D)
    shape = (1, 1, 5, 8) if layout == "BNSD" else (1, 5, 1, 8)
    x = torch.randn(2, 3, 5, 8) if layout == "BNSD" else torch.randn(2, 5, 3, 8)
    inputs = [x, emb.cos().reshape(shape), emb.sin().reshape(shape)]
    check_forward_backward(npu_rotary_mul, lambda x, cos, sin: x * cos + rotate_half(x) * sin, inputs, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rotary_interleave_matches_complex_multiplication(dtype: torch.dtype) -> None:
    theta = angles(5, 8)
    cos = theta.cos().repeat_interleave(2, -1).reshape(1, 5, 1, 8)
    sin = theta.sin().repeat_interleave(2, -1).reshape(1, 5, 1, 8)

    def meta_apply_rotary_emb(x):  # Llama's apply_rotary_emb on (B, S, N, D)
        freqs_cis = torch.polar(torch.ones_like(theta), theta)[None, :, None, :]
        x_complex = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(x_complex * freqs_cis).flatten(3)

    def ours(x):
        return npu_rotary_mul(x, cos.to(x.dtype), sin.to(x.dtype), "interleave")

    check_forward_backward(ours, meta_apply_rotary_emb, [torch.randn(2, 5, 3, 8)], dtype)


def test_rotary_rotate_matrix_reproduces_both_modes() -> None:
    x, r1, r2 = torch.randn(2, 2, 5, 8), torch.rand(1, 1, 5, 8), torch.rand(1, 1, 5, 8)
    half_rotate = torch.zeros(8, 8)
    half_rotate[:4, 4:] = torch.eye(4)
    half_rotate[4:, :4] = -torch.eye(4)
    interleave_rotate = torch.zeros(8, 8)
    for i in range(0, 8, 2):
        interleave_rotate[i, i + 1] = 1
        interleave_rotate[i + 1, i] = -1  # the doc example omits this minus sign
    interleave_rotate.requires_grad_()
    for mode, rotate in (("half", half_rotate), ("interleave", interleave_rotate)):
        assert_close(npu_rotary_mul(x, r1, r2, mode, rotate), npu_rotary_mul(x, r1, r2, mode), torch.float32)
    x.requires_grad_()
    npu_rotary_mul(x, r1, r2, "interleave", interleave_rotate).sum().backward()
    assert x.grad is not None and interleave_rotate.grad is None


@pytest.mark.parametrize(
    ("x", "r", "mode", "message"),
    [
        (torch.randn(2, 5, 8), torch.randn(1, 5, 8), "half", "input must be 4-D"),
        (torch.randn(1, 1, 5, 7), torch.randn(1, 1, 5, 7), "half", "must be even and < 896"),
        (torch.randn(1, 1, 1, 896), torch.randn(1, 1, 1, 896), "half", "must be even and < 896"),
        (torch.randn(2, 2, 5, 8), torch.randn(1, 1, 5, 8), "full", "rotary_mode must be"),
        (torch.randn(2, 2, 5, 8), torch.randn(1, 1, 4, 8), "half", "must broadcast to input"),
        (torch.randn(2, 2, 5, 8), torch.randn(1, 1, 5, 4), "half", "must broadcast to input"),
        (torch.randn(2, 2, 5, 8), torch.randn(2, 1, 5, 8), "interleave", "11SD, 1S1D or S11D"),
    ],
)
def test_rotary_rejects_invalid_inputs(x, r, mode, message) -> None:
    with pytest.raises(ValueError, match=message):
        npu_rotary_mul(x, r, r, mode)


def test_rotary_rejects_mismatched_coefficients_and_rotate() -> None:
    x = torch.randn(2, 2, 5, 8)
    with pytest.raises(ValueError, match="same shape"):
        npu_rotary_mul(x, torch.randn(1, 1, 5, 8), torch.randn(1, 2, 5, 8))
    with pytest.raises(ValueError, match=r"rotate must be a \(8, 8\) matrix"):
        npu_rotary_mul(x, torch.randn(1, 1, 5, 8), torch.randn(1, 1, 5, 8), rotate=torch.eye(4))


# ----------------------------------------------------------------------------------------------------------
# npu_swiglu, npu_geglu, fast_gelu
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [-1, 1])
def test_swiglu_activates_the_first_half(dim: int, dtype: torch.dtype) -> None:
    def reference(x):
        gate, up = x.chunk(2, dim=dim)
        return F.silu(gate) * up

    check_forward_backward(lambda x: npu_swiglu(x, dim=dim), reference, [torch.randn(3, 6, 8)], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("approximate", "gelu_kind"), [(1, "tanh"), (0, "none")])
def test_geglu_activates_the_second_half(approximate: int, gelu_kind: str, dtype: torch.dtype) -> None:
    def reference(x):
        hidden, gate = x.chunk(2, dim=-1)
        return hidden * F.gelu(gate, approximate=gelu_kind)

    check_forward_backward(lambda x: npu_geglu(x, -1, approximate)[0], reference, [torch.randn(3, 8)], dtype)
    x = torch.randn(3, 8)
    torch.testing.assert_close(
        npu_geglu(x, approximate=approximate)[1], F.gelu(x[:, 4:], approximate=gelu_kind)
    )


def test_geglu_default_is_tanh() -> None:
    x = torch.randn(4, 6)
    torch.testing.assert_close(npu_geglu(x)[1], F.gelu(x[:, 3:], approximate="tanh"))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: npu_swiglu(torch.randn(3, 5)), "must be even"),
        (lambda: npu_swiglu(torch.randn(3, 4), dim=2), "out of range"),
        (lambda: npu_swiglu(torch.ones(3, 4, dtype=torch.int32)), "self must be float16"),
        (lambda: npu_geglu(torch.randn(3, 4), approximate=2), "approximate must be 0"),
        (lambda: npu_geglu(torch.randn(3, 5)), "must be even"),
        (lambda: fast_gelu(torch.ones(3, dtype=torch.int64)), "self must be float16"),
    ],
)
def test_activations_reject_invalid_inputs(call, message) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_fast_gelu_doc_example() -> None:
    out = fast_gelu(torch.tensor([0.5991, 0.4094]))
    torch.testing.assert_close(out, torch.tensor([0.4403, 0.2733]), atol=1e-4, rtol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fast_gelu_formula(dtype: torch.dtype) -> None:
    x = torch.linspace(-6, 6, 97)
    check_forward_backward(fast_gelu, lambda x: x / (1 + torch.exp(-1.702 * x)), [x], dtype)
    assert (fast_gelu(x) - F.gelu(x)).abs().max() > 1e-2  # not the exact GELU


@pytest.mark.parametrize(
    ("sparse_mode", "with_mask", "with_pse"),
    [(0, True, False), (0, False, True), (2, True, False), (3, True, False), (4, True, False)],
)
def test_attention_in_query_blocks_equals_attention_at_once(
    sparse_mode: int, with_mask: bool, with_pse: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The emulation computes a block of queries at a time (as the fused kernel, it never holds
    the whole (S, S) scores); across block edges it must give what one block gives."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 300, 16, requires_grad=True) for _ in range(3))
    kwargs: dict = {"scale": 0.25, "sparse_mode": sparse_mode}
    if with_mask:
        kwargs["atten_mask"] = (
            torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)
            if sparse_mode
            else torch.rand(1, 1, 300, 300) > 0.7
        )
    if sparse_mode == 4:
        kwargs.update(pre_tockens=40, next_tockens=5)
    if with_pse:
        kwargs["pse"] = torch.randn(1, 2, 300, 300)

    def run() -> list[torch.Tensor]:
        out = ops.npu_fusion_attention(q, k, v, 2, "BNSD", **kwargs)
        grads = torch.autograd.grad(out[0].pow(2).sum(), (q, k, v))
        return [out[0], out[1], out[2], *grads]

    blocked = run()
    monkeypatch.setattr(ops, "_QUERY_BLOCK", 10_000)
    for got, want in zip(blocked, run(), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_attention_memory_grows_with_the_sequence_not_its_square() -> None:
    """Like the fused kernel, the emulation's peak grows linearly in S: doubling S doubles it
    (the whole (S, S) scores would quadruple it)."""
    from npu_migrate.verify.capture import LiveTensorBytes

    mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)
    peaks = []
    for length in (1024, 2048):
        q, k, v = (torch.randn(1, 4, length, 32) for _ in range(3))
        with torch.no_grad(), LiveTensorBytes() as memory:
            ops.npu_fusion_attention(q, k, v, 4, "BNSD", atten_mask=mask, scale=0.2, sparse_mode=2)
        peaks.append(memory.peak)
    assert peaks[1] / peaks[0] < 2.5, [f"{p / 2**20:.1f} MiB" for p in peaks]
    assert peaks[1] < 4 * 2048 * 2048 * 4 / 2  # well under one fp32 (N, S, S) scores tensor


def test_every_fused_operator_the_rules_write_is_emulated() -> None:
    """`run --emulate` and verify execute migrated code: an operator a rule writes that the
    emulation lacks would fail there ("npu_fast_gelu is missing")."""
    import re
    from pathlib import Path

    from npu_migrate.emulation import optim

    rules = "\n".join(p.read_text() for p in (Path(__file__).parents[2] / "rules").glob("*.yaml"))
    operators = set(re.findall(r"torch_npu\.((?:npu_)?\w*gelu|npu_\w+)\(", rules))
    optimizers = set(re.findall(r"torch_npu\.optim\.(\w+)(?![\w*])", rules))
    assert {"npu_fusion_attention", "npu_rms_norm", "npu_swiglu"} <= operators
    assert [name for name in sorted(operators) if name not in ops.__all__] == []
    assert [name for name in sorted(optimizers) if not hasattr(optim, name)] == []
    x = torch.linspace(-3, 3, 13)
    torch.testing.assert_close(ops.npu_fast_gelu(x), fast_gelu(x))


@pytest.mark.parametrize("dtype", DTYPES)
def test_npu_grouped_matmul_multiplies_each_groups_rows_by_its_weight(dtype: torch.dtype) -> None:
    x = torch.randn(12, 16).to(dtype)
    weight = torch.randn(3, 16, 8).to(dtype)
    sizes = [4, 0, 8]
    want = torch.cat([r.float() @ w.float() for r, w in zip(x.split(sizes), weight, strict=True)])
    by_ends = ops.npu_grouped_matmul(
        [x], [weight], group_list=torch.tensor([4, 4, 12]), split_item=3, group_type=0
    )
    by_sizes = ops.npu_grouped_matmul(
        [x], [weight], group_list=torch.tensor(sizes), split_item=2, group_type=0, group_list_type=1
    )
    assert len(by_ends) == len(by_sizes) == 1 and by_ends[0].dtype == dtype
    assert_close(by_ends[0], want, dtype)
    assert_close(by_sizes[0], want, dtype)
    transposed = weight.transpose(1, 2).contiguous().transpose(1, 2)  # (E, K, N) read from (E, N, K)
    assert_close(ops.npu_grouped_matmul([x], [transposed], group_list=torch.tensor([4, 4, 12]), split_item=3,
                                        group_type=0)[0], want, dtype)  # fmt: skip
    per_group = ops.npu_grouped_matmul([x], list(weight), group_list=torch.tensor([4, 4, 12]), group_type=0)
    assert [tuple(y.shape) for y in per_group] == [(4, 8), (0, 8), (8, 8)]
    pairs = ops.npu_grouped_matmul(
        [x[:4], x[4:]], [weight[0], weight[2]], bias=[torch.ones(8)] * 2, group_type=-1
    )
    assert_close(pairs[1], x[4:].float() @ weight[2].float() + 1, dtype)
    biases = [torch.full((8,), float(i)).to(dtype) for i in range(3)]
    biased = ops.npu_grouped_matmul([x], [weight], bias=biases, group_list=torch.tensor(sizes), split_item=3,
                                    group_type=0, group_list_type=1)  # fmt: skip
    assert_close(biased[0], want + torch.tensor([0.0] * 4 + [2.0] * 8)[:, None], dtype)  # each group its own


def test_npu_grouped_matmul_refuses_what_its_docs_refuse() -> None:
    x, weight = torch.randn(12, 16), torch.randn(3, 16, 8)

    def call(**kwargs: object) -> object:
        arguments: dict[str, object] = {
            "group_list": torch.tensor([4, 4, 12]),
            "split_item": 3,
            "group_type": 0,
        }
        arguments.update(kwargs)
        return ops.npu_grouped_matmul(arguments.pop("x", [x]), arguments.pop("weight", [weight]), **arguments)

    with pytest.raises(ValueError, match="must not decrease"):
        call(group_list=torch.tensor([4, 2, 12]))
    with pytest.raises(ValueError, match="cover exactly its 12 rows; it covers 13"):
        call(group_list=torch.tensor([4, 4, 13]))
    with pytest.raises(ValueError, match="cover exactly its 12 rows; it covers 10"):
        call(group_list=torch.tensor([4, 4, 10]))
    with pytest.raises(ValueError, match="1-D int64"):
        call(group_list=torch.tensor([4, 4, 12], dtype=torch.int32))
    with pytest.raises(ValueError, match="share one dtype"):
        call(weight=[weight.half()])
    with pytest.raises(ValueError, match="3-D weight"):
        call(group_list=torch.tensor([4, 12]))
    with pytest.raises(ValueError, match="not be transposed"):
        call(x=[torch.randn(16, 12).t()])
    with pytest.raises(ValueError, match="at most 1024 groups"):
        call(weight=[torch.randn(1025, 16, 8)], group_list=torch.full((1025,), 12))
    with pytest.raises(NotImplementedError, match="quantized"):
        call(scale=[torch.ones(8)])


def test_npu_grouped_matmul_gives_no_gradient_as_torch_npu_registers_none() -> None:
    """torch_npu's docs: an inference operator. Autograd's fallback for an operator without a
    derivative warns at the backward and hands back nothing: a training port must bring its own."""
    x = torch.randn(6, 4, requires_grad=True)
    out = ops.npu_grouped_matmul([x], [torch.randn(2, 4, 3)], group_list=torch.tensor([2, 6]), split_item=3,
                                 group_type=0)[0]  # fmt: skip
    assert out.requires_grad
    with pytest.warns(UserWarning, match="npu::npu_grouped_matmul: an autograd kernel was not registered"):
        out.sum().backward()
    assert x.grad is None


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_npu_grouped_matmul_add_accumulates_each_k_groups_product_in_fp32(dtype: torch.dtype) -> None:
    x, weight = torch.randn(10, 6).to(dtype), torch.randn(10, 5).to(dtype)
    start = torch.full((2, 6, 5), 0.5)
    out = ops.npu_grouped_matmul_add_(start, x, weight, torch.tensor([3, 7]), group_list_type=1)
    assert out is start
    want = torch.stack([x[:3].float().t() @ weight[:3].float(), x[3:].float().t() @ weight[3:].float()]) + 0.5
    torch.testing.assert_close(out, want)
    copy = ops.npu_grouped_matmul_add(torch.zeros(2, 6, 5), x, weight, torch.tensor([3, 10]))
    torch.testing.assert_close(copy, want - 0.5)
    with pytest.raises(ValueError, match="must be float16, bfloat16"):
        ops.npu_grouped_matmul_add_(torch.zeros(2, 6, 5), x.float(), weight.float(), torch.tensor([3, 10]))
    with pytest.raises(ValueError, match="only transpose_x=True"):
        ops.npu_grouped_matmul_add_(torch.zeros(2, 6, 5), x, weight, torch.tensor([3, 10]), transpose_x=False)
    with pytest.raises(ValueError, match=r"self must be \(groups, M, N\)"):
        ops.npu_grouped_matmul_add_(torch.zeros(3, 6, 5), x, weight, torch.tensor([3, 10]))
