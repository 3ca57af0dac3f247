"""Plain-PyTorch emulation of Huawei Ascend ``torch_npu`` fused operators.

Each function has the signature (parameter names, order, defaults) of the ``torch_npu`` operator with the
same name and follows its documentation (torch_npu 2.13.0 ``_op_plugin_docs.py``; the CANN aclnn pages
where that text is silent), so code migrated to Ascend can run and be tested on a CPU. Inputs are checked
against the documented limits and rejected with a ``ValueError`` naming the operator; documented features
this module does not emulate raise ``NotImplementedError``. Like the fused kernels, every operator computes
in float32 and returns the input dtype. Gradients flow through ordinary torch operations.
"""

from __future__ import annotations

import itertools
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "_npu_matmul_add_fp32",
    "fast_gelu",
    "npu_fast_gelu",
    "npu_fusion_attention",
    "npu_geglu",
    "npu_grouped_matmul",
    "npu_grouped_matmul_add",
    "npu_grouped_matmul_add_",
    "npu_rms_norm",
    "npu_rotary_mul",
    "npu_scaled_masked_softmax",
    "npu_scaled_masked_softmax_backward",
    "npu_swiglu",
]

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_MASK_DTYPES = (torch.bool, torch.uint8)


def _check_dtype(
    op: str, name: str, tensor: Tensor, allowed: tuple[torch.dtype, ...] = _FLOAT_DTYPES
) -> None:
    if tensor.dtype not in allowed:
        names = ", ".join(str(dtype).removeprefix("torch.") for dtype in allowed)
        raise ValueError(f"{op}: {name} must be {names}; got {tensor.dtype}")


def _check_rank(op: str, name: str, tensor: Tensor, low: int, high: int) -> None:
    if not low <= tensor.dim() <= high:
        raise ValueError(
            f"{op}: {name} must have {low} to {high} dimensions; got shape {tuple(tensor.shape)}"
        )


def _halves(op: str, x: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """Split ``x`` (as float32) into its first and second half along ``dim``."""
    _check_dtype(op, "self", x)
    _check_rank(op, "self", x, 1, 8)
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"{op}: dim={dim} is out of range for a {x.dim()}-D input")
    if x.shape[dim] % 2:
        raise ValueError(
            f"{op}: the size of dim {dim} must be even to split it in two halves; got {x.shape[dim]}"
        )
    first, second = x.float().chunk(2, dim=dim)
    return first, second


# ----------------------------------------------------------------------------------------------------------
# Activations and normalisation
# ----------------------------------------------------------------------------------------------------------


def fast_gelu(self: Tensor) -> Tensor:
    """Emulates ``torch_npu.fast_gelu``: ``x / (1 + exp(-1.702 x))``, i.e. ``x * sigmoid(1.702 x)``.

    Trap: this is neither ``F.gelu`` nor its tanh approximation; values differ by up to about 0.02.
    """
    _check_dtype("fast_gelu", "self", self)
    x = self.float()
    return (x * torch.sigmoid(1.702 * x)).to(self.dtype)


def npu_fast_gelu(input: Tensor) -> Tensor:
    """Emulates ``torch_npu.npu_fast_gelu``, the same FastGelu as ``fast_gelu`` under its op-plugin
    name (the A2/A3 formula, ``x / (1 + exp(-1.702 x))``)."""
    return fast_gelu(input)


def npu_swiglu(self: Tensor, dim: int = -1) -> Tensor:
    """Emulates ``torch_npu.npu_swiglu``: split ``self`` in two along ``dim``, return ``silu(A) * B``.

    Trap: the FIRST half ``A`` is activated (``torch.cat((gate, up), dim)`` in, ``silu(gate) * up`` out).
    """
    first, second = _halves("npu_swiglu", self, dim)
    return (F.silu(first) * second).to(self.dtype)


def npu_geglu(self: Tensor, dim: int = -1, approximate: int = 1) -> tuple[Tensor, Tensor]:
    """Emulates ``torch_npu.npu_geglu``: ``(A * gelu(B), gelu(B))`` for the halves ``A``, ``B`` of ``self``.

    Traps: unlike swiglu the SECOND half ``B`` is activated (CANN aclnnGeGlu: A is the first half of self,
    B the second); the default ``approximate=1`` is the tanh GELU (0: exact erf GELU); a tuple is returned.
    """
    if approximate not in (0, 1):
        raise ValueError(f"npu_geglu: approximate must be 0 (none) or 1 (tanh); got {approximate}")
    first, second = _halves("npu_geglu", self, dim)
    gelu = F.gelu(second, approximate="tanh" if approximate == 1 else "none")
    return (first * gelu).to(self.dtype), gelu.to(self.dtype)


_MASKED_FILL = -10000.0  # what a masked logit becomes before the softmax, as in Megatron's kernels


def _check_softmax_operands(op: str, x: Tensor, mask: Tensor) -> None:
    """The limits npu_scaled_masked_softmax and its backward share (torch_npu's op docs)."""
    _check_dtype(op, "x", x)
    _check_dtype(op, "mask", mask, (torch.bool,))
    _check_rank(op, "x", x, 2, 4)
    for axis, size in zip("HW", x.shape[-2:], strict=True):
        if not (32 <= size <= 4096 and size % 32 == 0):
            raise ValueError(
                f"{op}: x's {axis} axis must be a multiple of 32 from 32 to 4096; got {tuple(x.shape)}"
            )
    try:
        torch.broadcast_shapes(mask.shape, x.shape)
    except RuntimeError:
        raise ValueError(f"{op}: mask {tuple(mask.shape)} does not broadcast to x {tuple(x.shape)}") from None


def _softmax_mask(x: Tensor, mask: Tensor, fixed_triu_mask: bool) -> Tensor:
    """The positions masked: `mask`'s True, or the upper triangle above the diagonal the operator makes."""
    if not fixed_triu_mask:
        return mask
    rows, cols = x.shape[-2:]
    return torch.ones(rows, cols, dtype=torch.bool, device=x.device).triu(1)


def npu_scaled_masked_softmax(
    x: Tensor, mask: Tensor, scale: float = 1.0, fixed_triu_mask: bool = False
) -> Tensor:
    """Emulates ``torch_npu.npu_scaled_masked_softmax``: ``softmax(x * scale)`` over the last axis with
    the positions where ``mask`` is True masked (``fixed_triu_mask``: the upper triangle above the
    diagonal instead, a causal mask made by the operator).

    Limits (its docs): x float16, float32 or bfloat16; mask bool and broadcastable to x; the last two
    axes of x (H, W of its NCHW form) between 32 and 4096 and multiples of 32. Traps: True means MASKED;
    a masked logit becomes -10000 (the fill of the Megatron kernels it replaces), so a fully masked row is
    uniform, not NaN.
    """
    _check_softmax_operands("npu_scaled_masked_softmax", x, mask)
    masked = _softmax_mask(x, mask, fixed_triu_mask)
    logits = (x.float() * scale).masked_fill(masked, _MASKED_FILL)
    return torch.softmax(logits, dim=-1).to(x.dtype)


def npu_scaled_masked_softmax_backward(
    y_grad: Tensor, y: Tensor, mask: Tensor, scale: float, fixed_triu_mask: bool
) -> Tensor:
    """Emulates ``torch_npu.npu_scaled_masked_softmax_backward``: the gradient of the forward's input,
    ``scale * y * (y_grad - sum(y_grad * y))`` over the last axis, 0 where the mask masks.

    Limits: the forward's, on ``y``; ``y_grad`` has y's shape and dtype. The result has y_grad's dtype.
    """
    op = "npu_scaled_masked_softmax_backward"
    _check_softmax_operands(op, y, mask)
    if y_grad.shape != y.shape or y_grad.dtype != y.dtype:
        raise ValueError(
            f"{op}: y_grad must have y's shape and dtype; got {tuple(y_grad.shape)} {y_grad.dtype} "
            f"for y {tuple(y.shape)} {y.dtype}"
        )
    grad, probs = y_grad.float(), y.float()
    x_grad = probs * (grad - (grad * probs).sum(dim=-1, keepdim=True)) * scale
    return x_grad.masked_fill(_softmax_mask(y, mask, fixed_triu_mask), 0.0).to(y_grad.dtype)


def _npu_matmul_add_fp32(x: Tensor, weight: Tensor, C: Tensor) -> None:
    """Emulates ``torch_npu._npu_matmul_add_fp32`` (an ATB operator, Ascend's NNAL package):
    ``C += x.T @ weight`` in place, the product accumulated in float32 (the weight-gradient
    accumulation Megatron fuses: x is the output gradient, weight the layer's input).

    Limits (MindSpeed's and vllm-ascend's use; the operator has no torch_npu docs): x and weight 2-D,
    float16 or bfloat16 alike, with as many rows; C float32 of shape (x columns, weight columns).
    """
    op = "_npu_matmul_add_fp32"
    for name, tensor in (("x", x), ("weight", weight)):
        _check_dtype(op, name, tensor, (torch.float16, torch.bfloat16))
        _check_rank(op, name, tensor, 2, 2)
    _check_dtype(op, "C", C, (torch.float32,))
    if x.dtype != weight.dtype or x.shape[0] != weight.shape[0] or C.shape != (x.shape[1], weight.shape[1]):
        raise ValueError(
            f"{op}: expects x (m, k) and weight (m, n) of one dtype and C (k, n); got x {tuple(x.shape)} "
            f"{x.dtype}, weight {tuple(weight.shape)} {weight.dtype}, C {tuple(C.shape)}"
        )
    C.add_(x.float().t() @ weight.float())


class _NoDerivative(torch.autograd.Function):
    """What autograd does with an operator that registers no derivative (torch's fallback for
    one, in its default "warn" mode): the backward warns and hands back no gradient."""

    @staticmethod
    def forward(ctx: Any, op: str, output: Tensor, *inputs: Tensor) -> Tensor:
        ctx.op = op
        return output.clone()

    @staticmethod
    def backward(ctx: Any, *grads: Tensor) -> tuple[None, ...]:
        warnings.warn(
            f"npu::{ctx.op}: an autograd kernel was not registered to the Autograd key(s) but we are "
            "trying to backprop through it. This may lead to silently incorrect behavior.",
            UserWarning,
            stacklevel=2,
        )
        return (None,) * (len(ctx.needs_input_grad))


def _without_derivative(op: str, outputs: list[Tensor], inputs: Sequence[Tensor]) -> list[Tensor]:
    """``outputs`` as torch_npu returns them from an operator with no derivative."""
    tracked = [t for t in inputs if t.requires_grad]
    if not tracked or not torch.is_grad_enabled():
        return outputs
    return [_NoDerivative.apply(op, out.detach(), *tracked) for out in outputs]


def _group_ends(
    op: str, group_list: Tensor, group_list_type: int | None, rows: int, exact: bool
) -> list[int]:
    """Where each group's rows end: group_list is their cumulative ends (type 0) or sizes (type 1),
    which must cover every row (`exact`) or may stop short of the last."""
    if not isinstance(group_list, Tensor) or group_list.dtype != torch.int64 or group_list.dim() != 1:
        raise ValueError(f"{op}: group_list must be a 1-D int64 tensor; got {group_list!r:.80}")
    if group_list_type not in (0, 1):
        raise ValueError(f"{op}: group_list_type must be 0 (cumulative) or 1 (sizes); got {group_list_type}")
    values = group_list.tolist()
    if any(v < 0 for v in values):
        raise ValueError(f"{op}: group_list must not be negative; got {values}")
    ends = values if group_list_type == 0 else list(itertools.accumulate(values))
    if any(b < a for a, b in itertools.pairwise(ends)):
        raise ValueError(f"{op}: group_list (cumulative) must not decrease; got {values}")
    if len(values) > 1024:
        raise ValueError(f"{op}: at most 1024 groups; got {len(values)}")
    if ends and (ends[-1] != rows if exact else ends[-1] > rows):
        must = "exactly its" if exact else "at most its"
        raise ValueError(f"{op}: group_list must cover {must} {rows} rows; it covers {ends[-1]}")
    return ends


def _biases(op: str, bias: list[Tensor], groups: int) -> list[Tensor]:
    """One 1-D bias per weight (its docs: as many as weights), as a list however it came."""
    biases = list(bias[0]) if len(bias) == 1 and bias[0].dim() == 2 else bias
    if len(biases) != groups or any(b.dim() != 1 for b in biases):
        raise ValueError(f"{op}: bias must be one 1-D tensor per weight ({groups})")
    return biases


def _check_inner(op: str, name: str, tensor: Tensor) -> None:
    if tensor.shape[-1] >= 65536:
        raise ValueError(
            f"{op}: {name}'s last axis must be under 65536 (the inner limit); got {tuple(tensor.shape)}"
        )


def npu_grouped_matmul(
    x: list[Tensor],
    weight: list[Tensor],
    bias: list[Tensor] | None = None,
    scale: list[Tensor] | None = None,
    offset: list[Tensor] | None = None,
    antiquant_scale: list[Tensor] | None = None,
    antiquant_offset: list[Tensor] | None = None,
    per_token_scale: list[Tensor] | None = None,
    group_list: Tensor | None = None,
    activation_input: list[Tensor] | None = None,
    activation_quant_scale: list[Tensor] | None = None,
    activation_quant_offset: list[Tensor] | None = None,
    split_item: int = 0,
    group_type: int | None = None,
    group_list_type: int = 0,
    act_type: int = 0,
    tuning_config: list[int] | None = None,
    output_dtype: torch.dtype | None = None,
    x_dtype: int | None = None,
    weight_dtype: int | None = None,
    scale_dtype: int | None = None,
    per_token_scale_dtype: int | None = None,
) -> list[Tensor]:
    """Emulates ``torch_npu.npu_grouped_matmul`` without quantization: ``y_i = x_i @ weight_i (+ bias_i)``.

    Forms (its docs, A2 with a tensor group_list): ``group_type=-1``, lists of x (2-6-D) and 2-D weights,
    no group_list, one output per pair (split_item 0/1); ``group_type=0``, one 2-D x whose rows are split
    by group_list (cumulative ends, or sizes with ``group_list_type=1``; at most 1024 groups) against one
    3-D weight (E, K, N) or a list of 2-D ones, one output (split_item 2/3) or one per group (0/1). Float16,
    bfloat16 or float32, x and weight alike; a transposed weight is taken, a transposed x is not; inner axes
    under 65536; with ``group_type=0`` the group list covers exactly x's rows. Trap: no gradient (its docs:
    inference; the backward warns and gives none, as torch does for an operator without a derivative).
    """
    op = "npu_grouped_matmul"
    quantized = (scale, offset, antiquant_scale, antiquant_offset, per_token_scale, activation_input,
                 activation_quant_scale, activation_quant_offset)  # fmt: skip
    coded = (x_dtype, weight_dtype, scale_dtype, per_token_scale_dtype, tuning_config)
    if any(v is not None for v in (*quantized, *coded)) or act_type:
        raise NotImplementedError(f"{op}: quantized forms and fused activations are not emulated")
    if not x or not weight or len(x) > 128 or len(weight) > 128:
        raise ValueError(f"{op}: x and weight must be non-empty lists (at most 128 tensors)")
    for name, tensors in (("x", x), ("weight", weight)):
        for tensor in tensors:
            _check_dtype(op, name, tensor)
            _check_inner(op, name, tensor)
    if any(w.dtype != x[0].dtype for w in (*x, *weight)):
        raise ValueError(f"{op}: x and weight must share one dtype")
    if output_dtype not in (None, x[0].dtype):
        raise ValueError(f"{op}: output_dtype must be x's dtype without quantization; got {output_dtype}")
    if split_item not in (0, 1, 2, 3):
        raise ValueError(f"{op}: split_item must be 0 to 3; got {split_item}")
    if group_type == -1:
        if group_list is not None or split_item not in (0, 1) or len(x) != len(weight):
            raise ValueError(
                f"{op}: group_type=-1 takes as many x as weights, no group_list, split_item 0 or 1"
            )
        products = [a @ w for a, w in zip(x, weight, strict=True)]
        if bias is not None:
            products = [p + b for p, b in zip(products, _biases(op, bias, len(weight)), strict=True)]
    elif group_type == 0:
        if group_list is None or any(a.dim() != 2 for a in x):
            raise ValueError(f"{op}: group_type=0 takes 2-D x and a group_list")
        if any(not a.is_contiguous() for a in x):
            raise ValueError(f"{op}: x must not be transposed")
        rows = torch.cat(x) if len(x) > 1 else x[0]
        ends = _group_ends(op, group_list, group_list_type, rows.shape[0], exact=True)
        weights = list(weight[0]) if len(weight) == 1 and weight[0].dim() == 3 else weight
        if len(weights) != len(ends) or any(w.dim() != 2 for w in weights):
            raise ValueError(
                f"{op}: group_type=0 takes one 3-D weight (E, K, N) or E 2-D weights for E groups; got "
                f"{[tuple(w.shape) for w in weight]} for {len(ends)} groups"
            )
        if len({w.shape[1] for w in weights}) != 1:
            raise ValueError(f"{op}: every weight must have the same N")
        zero = rows.new_zeros(())
        biases = _biases(op, bias, len(weights)) if bias is not None else [zero] * len(weights)
        starts = [0, *ends[:-1]]
        products = [rows[s:e] @ w + b for s, e, w, b in zip(starts, ends, weights, biases, strict=True)]
        if split_item in (2, 3):
            products = [torch.cat(products)]
    else:
        raise NotImplementedError(
            f"{op}: group_type {group_type} (a list group_list's forms) is not emulated"
        )
    outputs = [p.to(x[0].dtype) for p in products]
    return _without_derivative(op, outputs, [*x, *weight])


def npu_grouped_matmul_add_(
    self: Tensor,
    x: Tensor,
    weight: Tensor,
    group_list: Tensor,
    transpose_x: bool = True,
    transpose_weight: bool = False,
    group_type: int = 2,
    group_list_type: int = 0,
) -> Tensor:
    """Emulates ``torch_npu.npu_grouped_matmul_add_``: ``self[i] += x_i^T @ weight_i`` in place, groups
    along K, the rows of x and weight (a mixture of experts' weight gradient).

    Limits (its docs): self float32 (g, M, N); x (K, M) and weight (K, N) 2-D, both float16 or both
    bfloat16; transpose_x only True, transpose_weight only False, group_type only 2; group_list int64,
    cumulative ends (group_list_type 0) or sizes (1), at most 1024, not past K; last axes under 65536.
    """
    op = "npu_grouped_matmul_add_"
    for name, tensor in (("x", x), ("weight", weight)):
        _check_dtype(op, name, tensor, (torch.float16, torch.bfloat16))
        _check_rank(op, name, tensor, 2, 2)
        _check_inner(op, name, tensor)
    _check_dtype(op, "self", self, (torch.float32,))
    if not transpose_x or transpose_weight or group_type != 2:
        raise ValueError(
            f"{op}: only transpose_x=True, transpose_weight=False and group_type=2 are supported"
        )
    if x.dtype != weight.dtype or x.shape[0] != weight.shape[0]:
        raise ValueError(
            f"{op}: x (K, M) and weight (K, N) must share K and dtype; got {tuple(x.shape)} {x.dtype}, "
            f"{tuple(weight.shape)} {weight.dtype}"
        )
    ends = _group_ends(op, group_list, group_list_type, x.shape[0], exact=False)
    if self.shape != (len(ends), x.shape[1], weight.shape[1]):
        raise ValueError(
            f"{op}: self must be (groups, M, N) = {(len(ends), x.shape[1], weight.shape[1])}; "
            f"got {tuple(self.shape)}"
        )
    with torch.no_grad():
        for i, (start, end) in enumerate(zip([0, *ends[:-1]], ends, strict=True)):
            self[i] += x[start:end].float().t() @ weight[start:end].float()
    return self


def npu_grouped_matmul_add(
    self: Tensor,
    x: Tensor,
    weight: Tensor,
    group_list: Tensor,
    transpose_x: bool = True,
    transpose_weight: bool = False,
    group_type: int = 2,
    group_list_type: int = 0,
) -> Tensor:
    """Emulates ``torch_npu.npu_grouped_matmul_add``: ``npu_grouped_matmul_add_`` on a copy of self."""
    args = (transpose_x, transpose_weight, group_type, group_list_type)
    return npu_grouped_matmul_add_(self.clone(), x, weight, group_list, *args)


def npu_rms_norm(self: Tensor, gamma: Tensor, epsilon: float = 1e-06) -> tuple[Tensor, Tensor]:
    """Emulates ``torch_npu.npu_rms_norm``: ``y = x * rsqrt(mean(x^2) + eps) * gamma``, returns ``(y, rstd)``.

    The mean runs over the trailing ``gamma.dim()`` axes (``gamma.shape == x.shape[-gamma.dim():]``).
    ``rstd`` is float32 and keeps ``x``'s rank with those axes set to 1 (x (4, 1, 4096), gamma (4096,) ->
    rstd (4, 1, 1)); like the kernel's intermediate it carries no gradient. Traps: a tuple is returned, not a
    tensor; ``gamma`` must have ``x``'s dtype; ``epsilon`` defaults to 1e-6, not LLaMA's usual 1e-5.
    """
    op = "npu_rms_norm"
    _check_dtype(op, "self", self)
    if gamma.dtype != self.dtype:
        raise ValueError(f"{op}: gamma dtype must equal self dtype ({self.dtype}); got {gamma.dtype}")
    _check_rank(op, "self", self, 1, 8)
    norm_dims = gamma.dim()
    if not 1 <= norm_dims <= self.dim() or gamma.shape != self.shape[self.dim() - norm_dims :]:
        raise ValueError(
            f"{op}: gamma shape must equal the trailing dimensions of self; got gamma {tuple(gamma.shape)} "
            f"for self {tuple(self.shape)}"
        )
    x = self.float()
    rstd = torch.rsqrt(x.pow(2).mean(dim=tuple(range(-norm_dims, 0)), keepdim=True) + epsilon)
    return (x * rstd * gamma.float()).to(self.dtype), rstd.detach()


# ----------------------------------------------------------------------------------------------------------
# Rotary position embedding
# ----------------------------------------------------------------------------------------------------------

_ROTARY_MODES = ("half", "interleave")
_ROTARY_MAX_HEAD_DIM = 896
_ROTARY_MAX_BATCH_HEADS = 1000  # B and N each, or B * N in interleave mode


def _check_rotary_coefficients(input: Tensor, r1: Tensor, r2: Tensor, rotary_mode: str) -> None:
    op = "npu_rotary_mul"
    if r1.shape != r2.shape:
        raise ValueError(
            f"{op}: r1 and r2 must have the same shape; got {tuple(r1.shape)} and {tuple(r2.shape)}"
        )
    fits = r1.shape[-1] == input.shape[-1] and all(
        size in (1, full) for size, full in zip(r1.shape[:3], input.shape[:3], strict=True)
    )
    if not fits:
        raise ValueError(
            f"{op}: r1/r2 of shape {tuple(r1.shape)} must broadcast to input {tuple(input.shape)} "
            "with the same last dimension D (e.g. 11SD, B1SD or BNSD for a BNSD input)"
        )
    if rotary_mode == "interleave" and sum(size != 1 for size in r1.shape[:3]) > 1:
        raise ValueError(
            f"{op}: in 'interleave' mode r1/r2 must be laid out as 11SD, 1S1D or S11D; got {tuple(r1.shape)}"
        )


def _rotate(x: Tensor, rotary_mode: str, rotate: Tensor | None) -> Tensor:
    """The ``x_new`` term of the documented formula ``output = r1 * x + r2 * x_new``."""
    if rotate is not None:
        return x @ rotate.detach().float()
    if rotary_mode == "half":
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)


def npu_rotary_mul(
    input: Tensor, r1: Tensor, r2: Tensor, rotary_mode: str = "half", rotate: Tensor | None = None
) -> Tensor:
    """Emulates ``torch_npu.npu_rotary_mul``: ``output = r1 * input + r2 * x_new`` (r1 = cos, r2 = sin).

    ``'half'``: ``x_new = cat(-x2, x1)`` on the two halves of D (GPT-NeoX / Hugging Face ``rotate_half``).
    ``'interleave'``: pairs ``(x0, x1) -> (-x1, x0)`` (Meta's complex form; cos/sin repeated per pair).
    With ``rotate`` given, ``x_new = input @ rotate`` and ``rotate`` gets no gradient, as documented.
    Traps: input and r1/r2 must be 4-D (BNSD, BSND or SBND) with D even and below 896, and B and N below 1000
    (interleave: B * N), read here as the two shorter of the first three axes; r1/r2 broadcast over B/N
    (interleave: only S may differ from 1); the doc's interleave ``rotate`` example lacks the minus sign.
    """
    op = "npu_rotary_mul"
    if rotary_mode not in _ROTARY_MODES:
        raise ValueError(f"{op}: rotary_mode must be 'half' or 'interleave'; got {rotary_mode!r}")
    for name, tensor in (("input", input), ("r1", r1), ("r2", r2)):
        _check_dtype(op, name, tensor)
        if tensor.dim() != 4:
            raise ValueError(f"{op}: {name} must be 4-D; got shape {tuple(tensor.shape)}")
    head_dim = input.shape[-1]
    if head_dim % 2 or head_dim >= _ROTARY_MAX_HEAD_DIM:
        raise ValueError(
            f"{op}: the last dimension D must be even and < {_ROTARY_MAX_HEAD_DIM}; got {head_dim}"
        )
    _check_rotary_coefficients(input, r1, r2, rotary_mode)
    batch, heads = sorted(input.shape[:3])[:2]  # B and N: the layout's axes other than S, the longest
    if max(batch, heads) >= _ROTARY_MAX_BATCH_HEADS or (
        rotary_mode == "interleave" and batch * heads >= _ROTARY_MAX_BATCH_HEADS
    ):
        raise ValueError(
            f"{op}: B and N must be below {_ROTARY_MAX_BATCH_HEADS} (interleave: B * N); "
            f"got shape {tuple(input.shape)}"
        )
    if rotate is not None:
        _check_dtype(op, "rotate", rotate)
        if rotate.shape != (head_dim, head_dim):
            raise ValueError(
                f"{op}: rotate must be a ({head_dim}, {head_dim}) matrix; got {tuple(rotate.shape)}"
            )
    x = input.float()
    return (r1.float() * x + r2.float() * _rotate(x, rotary_mode, rotate)).to(input.dtype)


# ----------------------------------------------------------------------------------------------------------
# Fused attention
# ----------------------------------------------------------------------------------------------------------

_FA = "npu_fusion_attention"
_LAYOUT_RANKS = {"BSH": 3, "SBH": 3, "BSND": 4, "BNSD": 4, "TND": 3}
_MAX_TOKENS = 2147483647
_MAX_HEAD_DIM = 768
_MAX_QUERY_HEADS = 256
_COMPRESSED_MASK_SIZE = 2048
# a storage holding a compressed causal mask -> where, laid out how and at which version it was one
_CAUSAL_MASKS_SEEN: weakref.WeakKeyDictionary[Any, tuple[int, tuple[int, ...], int]] = (
    weakref.WeakKeyDictionary()
)
_QUERY_BLOCK = 64  # queries computed at once: the fused kernel never holds the whole (S, S) scores
_ALIBI_COMPRESSED_ROWS = 1024
_SOFTMAX_STAT_WIDTH = 8


def _check_arguments(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    layout: str,
    padding_mask: Tensor | None,
    keep_prob: float,
    sparse_mode: int,
    softmax_layout: str,
) -> None:
    """Checks that need no shape arithmetic: layout, ranks, dtypes and scalar arguments."""
    if layout not in _LAYOUT_RANKS:
        raise ValueError(f"{_FA}: input_layout must be one of {', '.join(_LAYOUT_RANKS)}; got {layout!r}")
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        if tensor.dim() != _LAYOUT_RANKS[layout]:
            raise ValueError(
                f"{_FA}: {name} must be {_LAYOUT_RANKS[layout]}-D for {layout}; got {tuple(tensor.shape)}"
            )
    _check_dtype(_FA, "query", query)
    if key.dtype != query.dtype or value.dtype != query.dtype:
        raise ValueError(
            f"{_FA}: query, key and value dtypes must match; got {query.dtype}, {key.dtype}, {value.dtype}"
        )
    if padding_mask is not None:
        raise ValueError(f"{_FA}: padding_mask is not supported by torch_npu; pass None")
    if not 0 < keep_prob <= 1:
        raise ValueError(f"{_FA}: keep_prob must be in (0, 1]; got {keep_prob}")
    _check_sparse_mode(sparse_mode, layout == "TND")
    if softmax_layout not in ("", "TND") or (softmax_layout == "TND" and layout != "TND"):
        raise ValueError(
            f"{_FA}: softmax_layout must be '' or, with input_layout 'TND', 'TND'; got {softmax_layout!r}"
        )


def _head_counts(query: Tensor, key: Tensor, value: Tensor, head_num: int, layout: str) -> tuple[int, int]:
    """Number of query heads and key/value heads (BSH/SBH derive them from the hidden sizes)."""
    if layout not in ("BSH", "SBH"):
        n_axis = 1 if layout in ("BNSD", "TND") else 2
        if query.shape[n_axis] != head_num:
            raise ValueError(
                f"{_FA}: head_num={head_num} does not match the N axis of the {layout} query "
                f"({query.shape[n_axis]})"
            )
        return head_num, key.shape[n_axis]
    hidden_q, hidden_k, hidden_v = query.shape[-1], key.shape[-1], value.shape[-1]
    head_dim = hidden_q // head_num if head_num > 0 else 0
    if head_dim < 1 or hidden_q % head_num:
        raise ValueError(f"{_FA}: the query hidden size {hidden_q} is not a multiple of head_num={head_num}")
    if hidden_k % head_dim or hidden_k == 0 or hidden_v % (hidden_k // head_dim):
        raise ValueError(
            f"{_FA}: key/value hidden sizes ({hidden_k}, {hidden_v}) are not whole numbers of heads of "
            f"dimension {head_dim} (= query hidden size {hidden_q} / head_num {head_num})"
        )
    return head_num, hidden_k // head_dim


def _to_bnsd(x: Tensor, layout: str, heads: int) -> Tensor:
    """View ``x`` as (B, N, S, D); TND becomes a single batch of T tokens."""
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.transpose(1, 2)
    if layout == "TND":
        return x.transpose(0, 1).unsqueeze(0)
    x = x.unflatten(-1, (heads, -1))
    return x.transpose(1, 2) if layout == "BSH" else x.permute(1, 2, 0, 3)


def _from_bnsd(x: Tensor, layout: str) -> Tensor:
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.transpose(1, 2)
    if layout == "TND":
        return x[0].transpose(0, 1)
    if layout == "BSH":
        return x.transpose(1, 2).flatten(2)
    return x.permute(2, 0, 1, 3).flatten(2)


def _check_shapes(q: Tensor, k: Tensor, v: Tensor) -> None:
    """Documented shape rules, on the (B, N, S, D) views."""
    batch, n_q, s_q, d_q = q.shape
    batch_k, n_kv, s_kv, d_k = k.shape
    if (batch_k, n_kv, s_kv) != tuple(v.shape[:3]):
        raise ValueError(f"{_FA}: key and value must have the same batch, head and sequence sizes")
    if batch_k != batch:
        raise ValueError(f"{_FA}: query and key/value batch sizes differ ({batch} vs {batch_k})")
    if min(s_q, s_kv) < 1:
        raise ValueError(f"{_FA}: sequence lengths must be at least 1")
    if d_k != d_q or v.shape[3] > d_k:
        raise ValueError(
            f"{_FA}: head dims must satisfy Dq == Dk >= Dv; got Dq={d_q}, Dk={d_k}, Dv={v.shape[3]}"
        )
    if not 1 <= d_q <= _MAX_HEAD_DIM:
        raise ValueError(f"{_FA}: head dim D must be in 1..{_MAX_HEAD_DIM}; got {d_q}")
    if not 1 <= n_q <= _MAX_QUERY_HEADS:
        raise ValueError(f"{_FA}: the number of query heads must be in 1..{_MAX_QUERY_HEADS}; got {n_q}")
    if n_kv < 1 or n_q % n_kv:
        raise ValueError(f"{_FA}: query heads ({n_q}) must be a multiple of key/value heads ({n_kv}) for GQA")


def _check_sparse_mode(sparse_mode: int, varlen: bool) -> None:
    if not 0 <= sparse_mode <= 8:
        raise ValueError(f"{_FA}: sparse_mode must be in 0..8; got {sparse_mode}")
    if varlen and sparse_mode == 5:
        raise ValueError(
            f"{_FA}: sparse_mode=5 (uncompressed prefix) is not supported with input_layout 'TND'"
        )
    if not varlen and sparse_mode in (7, 8):
        raise ValueError(f"{_FA}: sparse_mode={sparse_mode} is only supported with input_layout 'TND'")


def _sequence_bounds(name: str, cumulative: Sequence[int] | None, total: int) -> list[tuple[int, int]]:
    """(start, end) of each sequence from cumulative ends; trailing zeros mark batches that are skipped."""
    if cumulative is None or len(cumulative) == 0:
        raise ValueError(
            f"{_FA}: input_layout 'TND' needs {name}: cumulative sequence ends without a leading 0, "
            "e.g. [2, 4, 6] for three sequences of length 2"
        )
    ends = [int(end) for end in cumulative]
    while len(ends) > 1 and ends[-1] == 0 and any(ends):
        ends.pop()
    starts = [0, *ends[:-1]]
    if any(end < start for start, end in zip(starts, ends, strict=True)) or ends[-1] > total:
        raise ValueError(
            f"{_FA}: {name}={list(cumulative)} must be non-decreasing cumulative ends (only trailing zeros "
            f"allowed) not exceeding the T axis ({total})"
        )
    return list(zip(starts, ends, strict=True))


def _check_atten_mask(
    mask: Tensor, sparse_mode: int, batch: int, heads: int, s_q: int, s_kv: int, varlen: bool
) -> None:
    """Documented atten_mask formats: compressed 2048x2048 for sparse modes 2-4, else BNSS/B1SS/11SS/SS."""
    _check_dtype(_FA, "atten_mask", mask, _MASK_DTYPES)
    if sparse_mode in (2, 3, 4):
        size = _COMPRESSED_MASK_SIZE
        if mask.shape != (size, size) or not _is_compressed_causal(mask):
            raise ValueError(
                f"{_FA}: sparse_mode={sparse_mode} needs the compressed mask "
                f"torch.triu(torch.ones({size}, {size}), 1).bool() as atten_mask; "
                f"got shape {tuple(mask.shape)}"
            )
        return
    leading = tuple(mask.shape[:-2])
    allowed = [()] if varlen else [(), (batch, heads), (batch, 1), (1, 1)]
    if mask.shape[-2:] != (s_q, s_kv) or leading not in allowed:
        formats = "SS" if varlen else "BNSS, B1SS, 11SS or SS"
        raise ValueError(
            f"{_FA}: atten_mask must be {formats} with SS = ({s_q}, {s_kv}); got shape {tuple(mask.shape)} "
            "(sparse_mode 2/3/4 take the compressed 2048x2048 mask instead)"
        )


def _is_compressed_causal(mask: Tensor) -> bool:
    """Whether a (2048, 2048) mask is triu(ones, 1), checked a block of rows at a time (a whole
    expected mask per call would be 4 MiB the real kernel never allocates); once per mask and
    version of it (a model passes the same buffer to every layer at every step, and the check
    cost half a second each time)."""
    storage = mask.untyped_storage()
    known = (mask.data_ptr(), mask.stride(), mask._version)
    if _CAUSAL_MASKS_SEEN.get(storage) == known:
        return True
    columns = torch.arange(mask.shape[1], device=mask.device)
    for start in range(0, mask.shape[0], _QUERY_BLOCK):
        rows = torch.arange(start, min(start + _QUERY_BLOCK, mask.shape[0]), device=mask.device)
        if not torch.equal(mask[start : start + len(rows)].bool(), columns > rows[:, None]):
            return False
    _CAUSAL_MASKS_SEEN[storage] = known
    return True


def _check_tokens(pre_tockens: int, next_tockens: int, s_q: int, s_kv: int) -> None:
    """Documented band limits for sparse_mode 0 and 4."""
    if next_tockens < 0 and not (pre_tockens >= -next_tockens and -next_tockens < s_kv):
        raise ValueError(
            f"{_FA}: a negative next_tockens needs pre_tockens >= |next_tockens| and |next_tockens| < Skv"
        )
    if pre_tockens < 0 and not (next_tockens >= -pre_tockens and -pre_tockens < s_q):
        raise ValueError(
            f"{_FA}: a negative pre_tockens needs next_tockens >= |pre_tockens| and |pre_tockens| < Sq"
        )


def _outside_band(rows: range, s_kv: int, pre: int, nxt: int, shift: int, device: torch.device) -> Tensor:
    """True where key j is not within [i + shift - pre, i + shift + next] of query i, for the
    queries i in `rows`."""
    queries = torch.arange(rows.start, rows.stop, device=device)
    offset = torch.arange(s_kv, device=device) - queries[:, None] - shift
    return (offset > nxt) | (offset < -pre)


def _block_mask(
    sparse_mode: int, user_mask: Tensor, s_q: int, s_kv: int, pre: int, nxt: int, rows: range | None = None
) -> Tensor:
    """Excluded (True) positions of one attention block for sparse modes 0-4, for the queries in
    `rows` (all by default; `user_mask` holds those rows only)."""
    device = user_mask.device
    rows = rows if rows is not None else range(s_q)
    if sparse_mode == 0:  # the given mask, limited to the band (origin: top left)
        return user_mask | _outside_band(rows, s_kv, pre, nxt, 0, device)
    if sparse_mode == 1:  # allMask: the given mask only
        return user_mask
    if sparse_mode == 2:  # leftUpCausal
        return _outside_band(rows, s_kv, _MAX_TOKENS, 0, 0, device)
    if sparse_mode == 3:  # rightDownCausal
        return _outside_band(rows, s_kv, _MAX_TOKENS, 0, s_kv - s_q, device)
    return _outside_band(rows, s_kv, pre, nxt, s_kv - s_q, device)  # 4: band, origin bottom right


def _varlen_mask(
    atten_mask: Tensor | None,
    sparse_mode: int,
    bounds: list[tuple[tuple[int, int], tuple[int, int]]],
    t_q: int,
    t_kv: int,
    pre: int,
    nxt: int,
    device: torch.device,
) -> Tensor:
    """Block-diagonal (T_q, T_kv) mask: each sequence attends to its own keys only."""
    mask = torch.ones(t_q, t_kv, dtype=torch.bool, device=device)
    for (q_start, q_end), (kv_start, kv_end) in bounds:
        s_q, s_kv = q_end - q_start, kv_end - kv_start
        block = mask[q_start:q_end, kv_start:kv_end]
        if atten_mask is None:
            block.fill_(False)
        else:
            block.copy_(_block_mask(sparse_mode, atten_mask[:s_q, :s_kv].bool(), s_q, s_kv, pre, nxt))
    return mask


def _check_pse(
    pse: Tensor, dtype: torch.dtype, batch: int, heads: int, s_q: int, s_kv: int, varlen: bool
) -> None:
    if pse.dtype != dtype:
        raise ValueError(f"{_FA}: pse dtype must equal the query dtype ({dtype}); got {pse.dtype}")
    if varlen:
        raise NotImplementedError(f"{_FA}: pse with input_layout 'TND' (compressed alibi) is not emulated")
    if pse.dim() != 4:
        raise ValueError(f"{_FA}: pse must be 4-D (BNSS, BN1Skv or 1NSS); got shape {tuple(pse.shape)}")
    pse_batch, pse_heads, rows, cols = pse.shape
    if s_q > _ALIBI_COMPRESSED_ROWS and rows == _ALIBI_COMPRESSED_ROWS:
        raise NotImplementedError(f"{_FA}: compressed alibi pse (last 1024 rows only) is not emulated")
    if (pse_heads, cols) != (heads, s_kv) or (pse_batch, rows) not in {(batch, s_q), (batch, 1), (1, s_q)}:
        raise ValueError(
            f"{_FA}: pse must be BNSS, BN1Skv or 1NSS with B={batch}, N={heads}, Sq={s_q}, Skv={s_kv}; "
            f"got shape {tuple(pse.shape)}"
        )


def _attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    pse: Tensor | None,
    mask_for: Callable[[range], Tensor | None],
    scale: float,
    keep_prob: float,
    generator: torch.Generator | None,
) -> tuple[Tensor, Tensor, Tensor]:
    """``Dropout(Softmax(Mask(scale * (q k^T + pse)))) v`` on float32 (B, N, S, D) tensors, a
    block of queries at a time (`mask_for(rows)`: the excluded positions of those queries), so
    that like the fused kernel it never holds the whole (S, S) scores; with dropout, in one
    block, so that the seed redraws its mask.

    Returns the output and the softmax row max and row sum. Fully masked rows give 0, like the kernel's
    invalid-row handling, instead of NaN.
    """
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    keys = k.transpose(-2, -1)
    s_q = q.shape[2]
    step = s_q if generator is not None else _QUERY_BLOCK
    outputs, maxima, sums = [], [], []
    for start in range(0, s_q, step):
        rows = range(start, min(start + step, s_q))
        logits = q[:, :, rows.start : rows.stop] @ keys
        if pse is not None:
            logits = logits + (pse if pse.shape[-2] == 1 else pse[..., rows.start : rows.stop, :])
        logits = logits * scale
        mask = mask_for(rows)
        if mask is not None:
            logits = logits.masked_fill(mask, float("-inf"))
        row_max = logits.detach().amax(dim=-1, keepdim=True)
        row_max = torch.where(row_max.isfinite(), row_max, 0.0)
        weights = torch.exp(logits - row_max)
        row_sum = weights.sum(dim=-1, keepdim=True)
        probs = weights / torch.where(row_sum > 0, row_sum, 1.0)
        if generator is not None:
            keep = torch.rand(probs.shape, generator=generator, device=probs.device) < keep_prob
            probs = probs * keep / keep_prob
        outputs.append(probs @ v)
        maxima.append(row_max)
        sums.append(row_sum.detach())
    return torch.cat(outputs, dim=2), torch.cat(maxima, dim=2), torch.cat(sums, dim=2)


def _softmax_stat(stat: Tensor, varlen: bool, softmax_layout: str) -> Tensor:
    """(B, N, S, 1) statistic -> (B, N, S, 8); TND: shape (T, N, 8), data in NTD order unless "TND"."""
    stat = stat.expand(*stat.shape[:-1], _SOFTMAX_STAT_WIDTH).contiguous()
    if not varlen:
        return stat
    heads, tokens = stat.shape[1:3]
    if softmax_layout == "TND":
        return stat[0].transpose(0, 1).contiguous()
    return stat.reshape(tokens, heads, _SOFTMAX_STAT_WIDTH)


def npu_fusion_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    head_num: int,
    input_layout: str,
    pse: Tensor | None = None,
    padding_mask: Tensor | None = None,
    atten_mask: Tensor | None = None,
    scale: float = 1.0,
    keep_prob: float = 1.0,
    pre_tockens: int = 2147483647,
    next_tockens: int = 2147483647,
    inner_precise: int = 0,
    prefix: Sequence[int] | None = None,
    actual_seq_qlen: Sequence[int] | None = None,
    actual_seq_kvlen: Sequence[int] | None = None,
    sparse_mode: int = 0,
    gen_mask_parallel: bool = True,
    sync: bool = False,
    softmax_layout: str = "",
) -> tuple[Tensor, Tensor, Tensor, Tensor, int, int, int]:
    """Emulates ``torch_npu.npu_fusion_attention``: ``Dropout(Softmax(Mask(scale*(pse + Q K^T)))) V``.

    Returns ``(attention_out, softmax_max, softmax_sum, softmax_out, seed, offset, numels)``: softmax_max/sum
    are float32 (B, N, Sq, 8) (TND: (T, N, 8), NTD data order unless ``softmax_layout="TND"``), softmax_out
    is the documented unused placeholder (empty), and seed/offset/numels describe the dropout mask (0 when
    ``keep_prob == 1``; ``torch.Generator().manual_seed(seed)`` redraws it).

    Traps: ``scale`` defaults to 1.0, not 1/sqrt(D); ``atten_mask`` True/1 means EXCLUDED (the opposite of
    SDPA's boolean mask); ``pse`` is added before scaling; ``head_num`` counts query heads, and key/value may
    have fewer (GQA, Nq % Nkv == 0); sparse_mode 2 (causal, top-left) and 3 (causal, bottom-right) need the
    compressed ``torch.triu(torch.ones(2048, 2048), 1).bool()`` mask and build the real one from the lengths;
    without ``atten_mask``, sparse_mode and pre/next_tockens are ignored (full attention, as documented);
    TND takes host lists ``actual_seq_qlen``/``actual_seq_kvlen`` of cumulative ends WITHOUT a leading 0.
    Emulated: layouts BSH, SBH, BSND, BNSD, TND and sparse modes 0-4; ``inner_precise``, ``prefix``,
    ``gen_mask_parallel`` and ``sync`` do not change the result here (fully masked rows always give 0).
    """
    layout, varlen = input_layout, input_layout == "TND"
    _check_arguments(query, key, value, layout, padding_mask, keep_prob, sparse_mode, softmax_layout)
    n_q, n_kv = _head_counts(query, key, value, head_num, layout)
    q, k, v = _to_bnsd(query, layout, n_q), _to_bnsd(key, layout, n_kv), _to_bnsd(value, layout, n_kv)
    _check_shapes(q, k, v)
    batch, _, s_q, _ = q.shape
    s_kv = k.shape[2]
    bounds: list[tuple[tuple[int, int], tuple[int, int]]] = []
    if varlen:
        q_bounds = _sequence_bounds("actual_seq_qlen", actual_seq_qlen, s_q)
        kv_bounds = _sequence_bounds("actual_seq_kvlen", actual_seq_kvlen, s_kv)
        assert actual_seq_qlen is not None and actual_seq_kvlen is not None  # else _sequence_bounds raised
        if len(actual_seq_qlen) != len(actual_seq_kvlen):
            raise ValueError(
                f"{_FA}: actual_seq_qlen and actual_seq_kvlen must have one entry per sequence each"
            )
        bounds = list(zip(q_bounds, kv_bounds, strict=False))  # a batch missing from either list is skipped
    # the longest sequence each side holds (written without max(..., default=), which torch.compile
    # cannot trace: it would break the caller's graph at every call)
    block_q = max([end - start for (start, end), _ in bounds] or [s_q])
    block_kv = max([end - start for _, (start, end) in bounds] or [s_kv])

    if atten_mask is None and sparse_mode != 0:
        warnings.warn(
            f"{_FA}: sparse_mode={sparse_mode} has no effect without atten_mask; "
            "like torch_npu, full (unmasked) attention is computed",
            stacklevel=2,
        )
    if atten_mask is not None:
        if sparse_mode >= 5:
            raise NotImplementedError(
                f"{_FA}: sparse_mode={sparse_mode} (prefix / split varlen) is not emulated"
            )
        _check_atten_mask(atten_mask, sparse_mode, batch, n_q, block_q, block_kv, varlen)
        if sparse_mode in (0, 4):
            _check_tokens(pre_tockens, next_tockens, block_q, block_kv)
    if pse is not None:
        _check_pse(pse, query.dtype, batch, n_q, s_q, s_kv, varlen)

    mask_for: Callable[[range], Tensor | None] = lambda rows: None  # noqa: E731
    if varlen:
        packed = _varlen_mask(
            atten_mask, sparse_mode, bounds, s_q, s_kv, pre_tockens, next_tockens, query.device
        )
        mask_for = lambda rows: packed[rows.start : rows.stop]  # noqa: E731
    elif atten_mask is not None:
        given = atten_mask

        def mask_for(rows: range) -> Tensor:
            user = given[..., rows.start : rows.stop, :].bool() if sparse_mode in (0, 1) else given
            return _block_mask(sparse_mode, user, s_q, s_kv, pre_tockens, next_tockens, rows)

    seed = numels = 0
    generator = None
    if keep_prob < 1:  # seed reproduces the dropout mask; numels counts its entries
        seed = int(torch.randint(2**31 - 1, ()).item())
        generator = torch.Generator(device=query.device).manual_seed(seed)
        pairs = sum((qe - qs) * (ke - ks) for (qs, qe), (ks, ke) in bounds) if varlen else batch * s_q * s_kv
        numels = n_q * pairs

    out, row_max, row_sum = _attend(
        q.float(),
        k.float(),
        v.float(),
        None if pse is None else pse.float(),
        mask_for,
        scale,
        keep_prob,
        generator,
    )
    return (
        _from_bnsd(out, layout).to(query.dtype).contiguous(),
        _softmax_stat(row_max, varlen, softmax_layout),
        _softmax_stat(row_sum, varlen, softmax_layout),
        query.new_empty(0),
        seed,
        0,
        numels,
    )
