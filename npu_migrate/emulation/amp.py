"""Mixed precision for the emulated NPU: `torch.npu.amp` (autocast, GradScaler, custom_fwd,
custom_bwd, with torch_npu's signatures) and the device-generic `torch.autocast("npu")`,
all running autocast on the backing device's type."""

from __future__ import annotations

import functools
from typing import Any

import torch

from npu_migrate.emulation import state


def backing_type(device_type: str = "npu") -> str:
    return state.backing().type if device_type == "npu" else device_type


class autocast(torch.amp.autocast_mode.autocast):
    """`torch.npu.amp.autocast(enabled=True, dtype=torch.float16, cache_enabled=True)`."""

    def __init__(
        self, enabled: bool = True, dtype: torch.dtype = torch.float16, cache_enabled: bool = True
    ) -> None:
        super().__init__(backing_type(), dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """`torch.npu.amp.GradScaler` (torch_npu's signature, including its `dynamic` flag)."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        dynamic: bool = True,
        enabled: bool = True,
    ) -> None:
        super().__init__(
            backing_type(),
            init_scale=init_scale,
            growth_factor=growth_factor if dynamic else 1.0 + 1e-12,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
            enabled=enabled,
        )


def custom_fwd(fwd: Any = None, *, cast_inputs: torch.dtype | None = None) -> Any:
    return functools.partial(torch.amp.custom_fwd, device_type=backing_type())(
        fwd=fwd, cast_inputs=cast_inputs
    )


def custom_bwd(bwd: Any) -> Any:
    return torch.amp.custom_bwd(bwd, device_type=backing_type())


class DeviceAutocast(torch.amp.autocast_mode.autocast):
    """`torch.autocast("npu", ...)` and `torch.amp.autocast("npu", ...)`."""

    def __init__(self, device_type: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(backing_type(device_type), *args, **kwargs)


class DeviceGradScaler(torch.amp.GradScaler):
    """`torch.amp.GradScaler("npu")`."""

    def __init__(self, device: str = "cuda", *args: Any, **kwargs: Any) -> None:
        super().__init__(backing_type(device), *args, **kwargs)
