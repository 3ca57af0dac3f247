"""The fused normalisations of apex and Transformer Engine in plain torch, computed in float32
as their kernels do: LayerNorm and RMSNorm (x * rsqrt(mean(x^2) + eps) * weight), the output in
the input's dtype, or in the weight's for apex's mixed-dtype forms; Transformer Engine's
`zero_centered_gamma` scales by (1 + weight)."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

Tensor = torch.Tensor


def layer_norm(
    x: Tensor, shape: Sequence[int], weight: Tensor | None, bias: Tensor | None, eps: float, out: torch.dtype
) -> Tensor:
    w = weight.float() if weight is not None else None
    b = bias.float() if bias is not None else None
    return F.layer_norm(x.float(), tuple(shape), w, b, eps).to(out)


def rms_norm(x: Tensor, shape: Sequence[int], weight: Tensor | None, eps: float, out: torch.dtype) -> Tensor:
    dims = tuple(range(-len(shape), 0))
    normed = x.float() * torch.rsqrt(x.float().pow(2).mean(dims, keepdim=True) + eps)
    return (normed * weight.float() if weight is not None else normed).to(out)


def _shape(normalized_shape: int | Sequence[int]) -> torch.Size:
    if isinstance(normalized_shape, numbers.Integral):
        return torch.Size((int(normalized_shape),))
    return torch.Size(normalized_shape)  # type: ignore[arg-type]


class _FusedNorm(nn.Module):
    """apex's fused norms: `weight` (and LayerNorm's `bias`) over `normalized_shape`; the
    mixed-dtype forms return their parameters' dtype."""

    mixed = False
    has_bias = True

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        memory_efficient: bool = False,
    ) -> None:
        super().__init__()
        self.normalized_shape = _shape(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        self.weight = nn.Parameter(torch.ones(self.normalized_shape)) if elementwise_affine else None
        if self.has_bias:  # an RMSNorm has none, not even None
            self.bias = nn.Parameter(torch.zeros(self.normalized_shape)) if elementwise_affine else None

    def _out(self, x: Tensor) -> torch.dtype:
        return self.weight.dtype if self.mixed and self.weight is not None else x.dtype


class FusedLayerNorm(_FusedNorm):
    """apex.normalization.FusedLayerNorm: weight and bias as nn.LayerNorm's."""

    def forward(self, x: Tensor) -> Tensor:
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps, self._out(x))


class MixedFusedLayerNorm(FusedLayerNorm):
    """Half inputs with float32 parameters; the output in the parameters' dtype."""

    mixed = True


class FusedRMSNorm(_FusedNorm):
    """apex.normalization.FusedRMSNorm."""

    has_bias = False

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, self.normalized_shape, self.weight, self.eps, self._out(x))


class MixedFusedRMSNorm(FusedRMSNorm):
    """Half inputs with float32 parameters; the output in the parameters' dtype."""

    mixed = True

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        *,
        memory_efficient: bool = False,
        **kwargs: bool,
    ) -> None:
        if not kwargs.pop("elementwise_affine", True):
            raise RuntimeError("MixedFusedRMSNorm does not support `elementwise_affine = False`")
        super().__init__(normalized_shape, eps, True, memory_efficient)


def fused_layer_norm_affine(
    x: Tensor,
    weight: Tensor,
    bias: Tensor,
    normalized_shape: Sequence[int],
    eps: float = 1e-6,
    memory_efficient: bool = False,
) -> Tensor:
    return layer_norm(x, normalized_shape, weight, bias, eps, x.dtype)


def fused_layer_norm(
    x: Tensor, normalized_shape: Sequence[int], eps: float = 1e-6, memory_efficient: bool = False
) -> Tensor:
    return layer_norm(x, normalized_shape, None, None, eps, x.dtype)


def fused_rms_norm_affine(
    x: Tensor,
    weight: Tensor,
    normalized_shape: Sequence[int],
    eps: float = 1e-6,
    memory_efficient: bool = False,
) -> Tensor:
    return rms_norm(x, normalized_shape, weight, eps, x.dtype)


def fused_rms_norm(
    x: Tensor, normalized_shape: Sequence[int], eps: float = 1e-6, memory_efficient: bool = False
) -> Tensor:
    return rms_norm(x, normalized_shape, None, eps, x.dtype)


def mixed_dtype_fused_layer_norm_affine(
    x: Tensor,
    weight: Tensor,
    bias: Tensor,
    normalized_shape: Sequence[int],
    eps: float = 1e-6,
    memory_efficient: bool = False,
) -> Tensor:
    return layer_norm(x, normalized_shape, weight, bias, eps, weight.dtype)


def mixed_dtype_fused_rms_norm_affine(
    x: Tensor,
    weight: Tensor,
    normalized_shape: Sequence[int],
    eps: float = 1e-6,
    memory_efficient: bool = False,
) -> Tensor:
    return rms_norm(x, normalized_shape, weight, eps, weight.dtype)
