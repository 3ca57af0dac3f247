"""`torch_npu.profiler` for the emulation: torch's own profiler on the backing device, with
torch_npu's names (ProfilerActivity.NPU, _ExperimentalConfig) accepted, and without what
torch_npu's `profile` lacks (its results go to trace files: no `key_averages()` or `events()`,
torch_npu/profiler/profiler.py)."""

from __future__ import annotations

import enum
from typing import Any

import torch.profiler as _torch_profiler
from torch.profiler import ProfilerAction, schedule, tensorboard_trace_handler

from npu_migrate.emulation import state

__all__ = [
    "ProfilerAction",
    "ProfilerActivity",
    "_ExperimentalConfig",
    "profile",
    "schedule",
    "tensorboard_trace_handler",
]


class ProfilerActivity(enum.Enum):
    CPU = "CPU"
    NPU = "NPU"


class _ExperimentalConfig:
    """Accepts torch_npu's profiler settings (levels, AI-core metrics, export types)."""

    def __init__(self, **settings: Any) -> None:
        self.settings = settings


def _activities(activities: Any) -> list[_torch_profiler.ProfilerActivity] | None:
    if activities is None:
        return None
    device = _torch_profiler.ProfilerActivity.CUDA if state.backing().type == "cuda" else None
    mapped = {
        ProfilerActivity.CPU: _torch_profiler.ProfilerActivity.CPU,
        ProfilerActivity.NPU: device,
    }
    return [a for a in (mapped.get(x, x) for x in activities) if a is not None] or [
        _torch_profiler.ProfilerActivity.CPU
    ]


class _Missing:
    """An attribute torch_npu's profile does not have: reading it raises as on the device."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        raise AttributeError(f"'profile' object has no attribute '{self.name}'")


class profile(_torch_profiler.profile):
    key_averages = _Missing()
    events = _Missing()

    def __init__(
        self, *args: Any, activities: Any = None, experimental_config: Any = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, activities=_activities(activities), **kwargs)
