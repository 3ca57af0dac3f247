"""Transformer Engine's PyTorch modules in plain torch (`transformer_engine.pytorch`), with the
parameter names its checkpoints hold (LayerNormLinear's `layer_norm_weight`, LayerNormMLP's
`fc1_weight`...), its activations (`gelu` is the tanh form; `*glu` gate the first half of fc1's
output with the second) and DotProductAttention's formats and mask types (a boolean mask is
True where a position is masked out). One tensor-parallel rank only; FP8 is not emulated:
under `fp8_autocast` the modules compute in their inputs' dtype."""

from __future__ import annotations

import contextlib
import enum
import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from npu_migrate.verify.stand_ins import norms
from npu_migrate.verify.stand_ins.attention import Window, attend, attend_packed

Tensor = torch.Tensor


def _one_rank(kwargs: dict[str, Any]) -> None:
    size = kwargs.get("tp_size", 1) or 1
    if size != 1:
        raise NotImplementedError(
            f"npu-migrate's Transformer Engine stand-in runs one tensor-parallel rank, not {size}"
        )


def _dtype(params_dtype: torch.dtype | None) -> torch.dtype:
    return params_dtype or torch.get_default_dtype()


def _returned(out: Tensor, bias: Tensor | None, return_bias: bool, extra: tuple[Tensor, ...] = ()) -> Any:
    if return_bias:
        return (out, bias, *extra)
    return (out, *extra) if extra else out


def _initialise(weight: Tensor, method: Any) -> None:
    """The caller's init_method (Megatron passes its own), else nn.Linear's."""
    if method is not None:
        method(weight)
    else:
        nn.init.kaiming_uniform_(weight, a=math.sqrt(5))


ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x, approximate="tanh"),
    "qgelu": lambda x: x * torch.sigmoid(1.702 * x),
    "relu": F.relu,
    "srelu": lambda x: F.relu(x).square(),
    "silu": F.silu,
}
GATED = {"geglu": "gelu", "qgeglu": "qgelu", "reglu": "relu", "sreglu": "srelu", "swiglu": "silu"}


def activate(x: Tensor, activation: str) -> Tensor:
    if activation in GATED:
        first, second = x.chunk(2, dim=-1)
        return ACTIVATIONS[GATED[activation]](first) * second
    if activation not in ACTIVATIONS:
        raise ValueError(f"Unsupported activation: {activation}")
    return ACTIVATIONS[activation](x)


def _weight_and_bias(
    in_features: int, out_features: int, bias: bool, init_method: Any, params_dtype: torch.dtype | None
) -> tuple[nn.Parameter, nn.Parameter | None]:
    """A Linear's parameters as TE makes them: the weight initialised, the bias zero."""
    weight = nn.Parameter(torch.empty(out_features, in_features, dtype=_dtype(params_dtype)))
    _initialise(weight, init_method)
    return weight, nn.Parameter(torch.zeros(out_features, dtype=_dtype(params_dtype))) if bias else None


class Linear(nn.Module):
    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        init_method: Any = None,
        params_dtype: torch.dtype | None = None,
        device: Any = None,
        return_bias: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        _one_rank(kwargs)
        self.in_features, self.out_features, self.return_bias = in_features, out_features, return_bias
        self.weight, self.bias = _weight_and_bias(in_features, out_features, bias, init_method, params_dtype)

    def forward(self, x: Tensor, is_first_microbatch: bool | None = None) -> Any:
        out = F.linear(x, self.weight, None if self.return_bias else self.bias)
        return _returned(out, self.bias, self.return_bias)


class GroupedLinear(nn.Module):
    """`num_gemms` Linears over consecutive row blocks of one input (`m_splits` rows each), as a
    mixture of experts runs its experts; weights `weight0`, `weight1`... as TE's checkpoints."""

    def __init__(
        self,
        num_gemms: int,
        in_features: int,
        out_features: int,
        bias: bool = True,
        init_method: Any = None,
        params_dtype: torch.dtype | None = None,
        device: Any = None,
        return_bias: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        _one_rank(kwargs)
        self.num_gemms, self.return_bias = num_gemms, return_bias
        for i in range(num_gemms):
            weight, biased = _weight_and_bias(in_features, out_features, bias, init_method, params_dtype)
            self.register_parameter(f"weight{i}", weight)
            self.register_parameter(f"bias{i}", biased)

    def forward(self, x: Tensor, m_splits: list[int], is_first_microbatch: bool | None = None) -> Any:
        if len(m_splits) != self.num_gemms:
            raise ValueError(
                f"Number of splits should match number of GEMMs: {len(m_splits)} != {self.num_gemms}"
            )
        weights = [getattr(self, f"weight{i}") for i in range(self.num_gemms)]
        biases = [getattr(self, f"bias{i}") for i in range(self.num_gemms)]
        rows = torch.split(x.reshape(-1, x.shape[-1]), list(m_splits))
        out = torch.cat(
            [
                F.linear(r, w, None if self.return_bias else b)
                for r, w, b in zip(rows, weights, biases, strict=True)
            ]
        ).view(*x.shape[:-1], -1)
        return (out, biases) if self.return_bias else out


def _gamma(size: int, dtype: torch.dtype, zero_centered: bool) -> nn.Parameter:
    """A norm's scale: ones, or zeros where it is zero-centred (the norm scales by 1 + gamma)."""
    return nn.Parameter((torch.zeros if zero_centered else torch.ones)(size, dtype=dtype))


def _normalise(
    x: Tensor, normalization: str, gamma: Tensor, bias: Tensor | None, eps: float, zero_centered: bool
) -> Tensor:
    scale = gamma + 1 if zero_centered else gamma
    if normalization == "RMSNorm":
        return norms.rms_norm(x, (x.shape[-1],), scale, eps, x.dtype)
    return norms.layer_norm(x, (x.shape[-1],), scale, bias, eps, x.dtype)


class _Normed(nn.Module):
    """The normalisation TE modules put in front: LayerNorm or RMSNorm, gamma zero-centred or not."""

    eps: float

    def _norm_parameters(
        self, size: int, normalization: str, dtype: torch.dtype, zero_centered: bool
    ) -> None:
        if normalization not in ("LayerNorm", "RMSNorm"):
            raise ValueError(f"Unsupported normalization type: {normalization}")
        self.normalization, self.zero_centered_gamma = normalization, zero_centered
        self.layer_norm_weight = _gamma(size, dtype, zero_centered)
        self.layer_norm_bias = (
            nn.Parameter(torch.zeros(size, dtype=dtype)) if normalization == "LayerNorm" else None
        )

    def _normed(self, x: Tensor) -> Tensor:
        return _normalise(
            x, self.normalization, self.layer_norm_weight, self.layer_norm_bias, self.eps,
            self.zero_centered_gamma,
        )  # fmt: skip


class _Norm(nn.Module):
    """TE's LayerNorm and RMSNorm (`normalization`): `weight` (and LayerNorm's `bias`)."""

    normalization = "LayerNorm"

    def __init__(
        self,
        hidden_size: int,
        eps: float = 1e-5,
        sequence_parallel: bool | None = None,
        params_dtype: torch.dtype | None = None,
        zero_centered_gamma: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        self.eps, self.zero_centered_gamma = eps, zero_centered_gamma
        self.weight = _gamma(hidden_size, _dtype(params_dtype), zero_centered_gamma)
        if self.normalization == "LayerNorm":  # an RMSNorm has no bias, not even None
            self.bias = nn.Parameter(torch.zeros(hidden_size, dtype=_dtype(params_dtype)))

    def forward(self, x: Tensor) -> Tensor:
        bias = getattr(self, "bias", None)
        return _normalise(x, self.normalization, self.weight, bias, self.eps, self.zero_centered_gamma)


class LayerNorm(_Norm):
    normalization = "LayerNorm"


class RMSNorm(_Norm):
    normalization = "RMSNorm"


class LayerNormLinear(_Normed):
    def __init__(
        self,
        in_features: int,
        out_features: int,
        eps: float = 1e-5,
        bias: bool = True,
        normalization: str = "LayerNorm",
        init_method: Any = None,
        return_bias: bool = False,
        params_dtype: torch.dtype | None = None,
        return_layernorm_output: bool = False,
        zero_centered_gamma: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        _one_rank(kwargs)
        dtype = _dtype(params_dtype)
        self.eps, self.return_bias, self.return_layernorm_output = eps, return_bias, return_layernorm_output
        self._norm_parameters(in_features, normalization, dtype, zero_centered_gamma)
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype)) if bias else None
        _initialise(self.weight, init_method)

    def forward(self, x: Tensor, is_first_microbatch: bool | None = None) -> Any:
        normed = self._normed(x)
        out = F.linear(normed, self.weight, None if self.return_bias else self.bias)
        return _returned(out, self.bias, self.return_bias, (normed,) if self.return_layernorm_output else ())


class LayerNormMLP(_Normed):
    def __init__(
        self,
        hidden_size: int,
        ffn_hidden_size: int,
        eps: float = 1e-5,
        bias: bool = True,
        normalization: str = "LayerNorm",
        activation: str = "gelu",
        init_method: Any = None,
        output_layer_init_method: Any = None,
        return_bias: bool = False,
        params_dtype: torch.dtype | None = None,
        return_layernorm_output: bool = False,
        zero_centered_gamma: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        _one_rank(kwargs)
        dtype = _dtype(params_dtype)
        self.eps, self.activation = eps, activation
        self.return_bias, self.return_layernorm_output = return_bias, return_layernorm_output
        self._norm_parameters(hidden_size, normalization, dtype, zero_centered_gamma)
        widened = ffn_hidden_size * (2 if activation in GATED else 1)
        self.fc1_weight = nn.Parameter(torch.empty(widened, hidden_size, dtype=dtype))
        self.fc1_bias = nn.Parameter(torch.zeros(widened, dtype=dtype)) if bias else None
        self.fc2_weight = nn.Parameter(torch.empty(hidden_size, ffn_hidden_size, dtype=dtype))
        self.fc2_bias = nn.Parameter(torch.zeros(hidden_size, dtype=dtype)) if bias else None
        _initialise(self.fc1_weight, init_method)
        _initialise(self.fc2_weight, output_layer_init_method)

    def forward(self, x: Tensor, is_first_microbatch: bool | None = None) -> Any:
        normed = self._normed(x)
        hidden = activate(F.linear(normed, self.fc1_weight, self.fc1_bias), self.activation)
        out = F.linear(hidden, self.fc2_weight, None if self.return_bias else self.fc2_bias)
        return _returned(
            out, self.fc2_bias, self.return_bias, (normed,) if self.return_layernorm_output else ()
        )


MASK_TYPES = (
    "no_mask", "padding", "causal", "padding_causal", "causal_bottom_right", "padding_causal_bottom_right",
    "arbitrary",
)  # fmt: skip


class DotProductAttention(nn.Module):
    """softmax(scale q k^T, masked) v over [s, b, h, d] (sbhd), [b, s, h, d] (bshd) or packed
    tokens [t, h, d] (thd, with cu_seqlens); the output's heads flattened ([s, b, h d])."""

    def __init__(
        self,
        num_attention_heads: int,
        kv_channels: int | tuple[int, int],
        num_gqa_groups: int | None = None,
        attention_dropout: float = 0.0,
        qkv_format: str = "sbhd",
        attn_mask_type: str = "causal",
        window_size: tuple[int, int] | None = None,
        softmax_scale: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        _one_rank(kwargs)
        head_dim = kv_channels if isinstance(kv_channels, int) else kv_channels[0]
        self.softmax_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(head_dim)
        self.attention_dropout, self.qkv_format = attention_dropout, qkv_format
        self.attn_mask_type, self.window_size = attn_mask_type, window_size

    def forward(
        self,
        query_layer: Tensor,
        key_layer: Tensor,
        value_layer: Tensor,
        attention_mask: Tensor | tuple[Tensor, Tensor] | None = None,
        qkv_format: str | None = None,
        cu_seqlens_q: Tensor | None = None,
        cu_seqlens_kv: Tensor | None = None,
        attn_mask_type: str | None = None,
        window_size: tuple[int, int] | None = None,
        core_attention_bias_type: str = "no_bias",
        core_attention_bias: Tensor | None = None,
        alibi_slopes: Tensor | None = None,
        **kwargs: Any,
    ) -> Tensor:
        layout = qkv_format or self.qkv_format
        mask_type = attn_mask_type or self.attn_mask_type
        if mask_type not in MASK_TYPES:
            raise ValueError(f"attn_mask_type {mask_type} is not supported")
        window = self._window(mask_type, window_size or self.window_size)
        dropout = self.attention_dropout if self.training else 0.0
        if layout == "thd":
            if cu_seqlens_q is None or cu_seqlens_kv is None:
                raise ValueError("qkv_format thd needs cu_seqlens_q and cu_seqlens_kv")
            out, _, _ = attend_packed(
                query_layer, key_layer, value_layer, cu_seqlens_q, cu_seqlens_kv,
                scale=self.softmax_scale, window=window, alibi_slopes=alibi_slopes, dropout_p=dropout,
            )  # fmt: skip
            return out.flatten(-2)
        if layout not in ("sbhd", "bshd"):
            raise ValueError(f"qkv_format {layout} is not supported")
        to_bhsd = (lambda t: t.permute(1, 2, 0, 3)) if layout == "sbhd" else (lambda t: t.transpose(1, 2))
        q, k, v = (to_bhsd(t) for t in (query_layer, key_layer, value_layer))
        bias = self._bias(mask_type, attention_mask, core_attention_bias_type, core_attention_bias, q)
        out = attend(q, k, v, scale=self.softmax_scale, window=window, bias=bias, dropout_p=dropout).out
        out = out.permute(2, 0, 1, 3) if layout == "sbhd" else out.transpose(1, 2)
        return out.flatten(-2)

    @staticmethod
    def _window(mask_type: str, window_size: tuple[int, int] | None) -> Window | None:
        causal = "causal" in mask_type
        bottom_right = mask_type.endswith("bottom_right")
        if window_size is not None:
            return Window.flash(window_size, causal, bottom_right)
        return Window.causal(bottom_right) if causal else None

    @staticmethod
    def _bias(
        mask_type: str,
        mask: Tensor | tuple[Tensor, Tensor] | None,
        bias_type: str,
        bias: Tensor | None,
        q: Tensor,
    ) -> Tensor | None:
        """The padding or arbitrary mask (True: masked out) and any post-scale bias as one additive bias."""
        total: Tensor | None = None
        if mask is not None and ("padding" in mask_type or mask_type == "arbitrary"):
            if isinstance(mask, tuple):  # (queries' [b, 1, 1, sq], keys' [b, 1, 1, sk]) padding masks
                mask = mask[0].transpose(-1, -2) | mask[1]
            total = torch.zeros(mask.shape, device=q.device).masked_fill(mask, float("-inf"))
        if bias_type == "post_scale_bias" and bias is not None:
            total = bias.float() if total is None else total + bias.float()
        elif bias_type not in ("no_bias", "post_scale_bias"):
            raise NotImplementedError(f"npu-migrate's Transformer Engine stand-in has no {bias_type} bias")
        return total


@contextlib.contextmanager
def fp8_autocast(enabled: bool = True, **kwargs: Any) -> Iterator[None]:
    """FP8 is not emulated: the modules compute in their inputs' dtype inside it."""
    yield


@contextlib.contextmanager
def fp8_model_init(enabled: bool = True, **kwargs: Any) -> Iterator[None]:
    yield


class Format(enum.Enum):
    E4M3 = "E4M3"
    E5M2 = "E5M2"
    HYBRID = "HYBRID"


class DelayedScaling:
    """An FP8 recipe: kept, never applied (FP8 is not emulated)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs


class QuantizedTensor(torch.Tensor):
    """TE 2.x's base of its FP8 tensors (`transformer_engine.pytorch.tensor`): projects test
    `isinstance(t, QuantizedTensor)`; none is ever made, FP8 not being emulated."""


class Float8Tensor(QuantizedTensor):
    """TE's delayed- and current-scaling FP8 tensor (`...tensor.float8_tensor`): never made."""


def _fp8_only(name: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(f"transformer_engine.pytorch.tensor.utils.{name}: FP8 is not emulated")

    refuse.__name__ = name
    return refuse


replace_raw_data = _fp8_only("replace_raw_data")
cast_master_weights_to_fp8 = _fp8_only("cast_master_weights_to_fp8")


class CudaRNGStatesTracker:
    """TE's model-parallel RNG tracker (`transformer_engine.pytorch.distributed`), which
    Megatron's TE tracker subclasses: named generator states, forked into for a block. On the
    original side's device: the CPU generator's states where no CUDA is present."""

    def __init__(self) -> None:
        self.states_: dict[str, Tensor] = {}

    def _device_state(self) -> Tensor:
        return torch.cuda.get_rng_state() if torch.cuda.is_available() else torch.get_rng_state()

    def _set_device_state(self, state: Tensor) -> None:
        (torch.cuda.set_rng_state if torch.cuda.is_available() else torch.set_rng_state)(state)

    def reset(self) -> None:
        self.states_ = {}

    def get_states(self) -> dict[str, Tensor]:
        return dict(self.states_)

    def set_states(self, states: dict[str, Tensor]) -> None:
        self.states_ = dict(states)

    def add(self, name: str, seed: int) -> None:
        if name in self.states_:
            raise Exception(f"cuda rng state {name} already exists")
        saved = self._device_state()
        torch.manual_seed(seed)
        self.states_[name] = self._device_state()
        self._set_device_state(saved)

    @contextlib.contextmanager
    def fork(self, name: str = "model-parallel-rng") -> Iterator[None]:
        if name not in self.states_:
            raise Exception(f"cuda rng state {name} is not added")
        saved = self._device_state()
        self._set_device_state(self.states_[name])
        try:
            yield
        finally:
            self.states_[name] = self._device_state()
            self._set_device_state(saved)


def checkpoint(function: Any, *args: Any, **kwargs: Any) -> Any:
    """TE's activation recomputation (`transformer_engine.pytorch.distributed.checkpoint`): its
    own keyword arguments (distribute_saved_activations, get_rng_state_tracker, tp_group...)
    taken, torch's non-reentrant checkpoint run."""
    for own in ("distribute_saved_activations", "get_rng_state_tracker", "tp_group", "use_reentrant"):
        kwargs.pop(own, None)
    return torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=False, **kwargs)
