"""torch's inference fast paths as a device takes them under a torch function mode.

`nn.TransformerEncoder(Layer)` and `nn.MultiheadAttention` in eval mode without grad run one
fused operator (`torch._transformer_encoder_layer_fwd`, `torch._native_multi_head_attention`)
on CPU, CUDA and the private-use device, unless "some Tensor argument has_torch_function",
which any torch function mode makes true of every tensor. The emulation's mode (and verify's
CUDA-answering one on the original side) would then always take the slow path, which a device
does not: inside these forwards the check sees the arguments alone."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import torch


def patches() -> list[tuple[object, str, object]]:
    """(owner, name, replacement) for the forwards whose fast path the check decides."""
    from torch.nn.modules import activation, transformer

    owners = (
        transformer.TransformerEncoderLayer,
        transformer.TransformerEncoder,
        activation.MultiheadAttention,
    )
    return [(owner, "forward", _as_on_the_device(owner.forward)) for owner in owners]


def _as_on_the_device(forward: Callable[..., Any]) -> Callable[..., Any]:
    if getattr(forward, "_checked_as_on_the_device", False):
        return forward  # patched already (the emulation and verify's side in one process)

    @functools.wraps(forward)
    def checked_as_on_the_device(*args: Any, **kwargs: Any) -> Any:
        overrides = torch.overrides
        mode_aware = overrides.has_torch_function
        overrides.has_torch_function = _has_override  # type: ignore[assignment]
        try:
            return forward(*args, **kwargs)
        finally:
            overrides.has_torch_function = mode_aware

    checked_as_on_the_device._checked_as_on_the_device = True  # type: ignore[attr-defined]
    return checked_as_on_the_device


def _has_override(values: Iterable[Any]) -> bool:
    """`has_torch_function` of arguments alone: a tensor subclass with its own __torch_function__."""
    plain = torch._C._disabled_torch_function_impl
    return any(
        isinstance(v, torch.Tensor)
        and getattr(type(v), "__torch_function__", plain) is not plain
        and type(v) not in (torch.Tensor, torch.nn.Parameter)
        for v in values
    )
