"""Which real device stands in for the NPU. Chosen once, when the emulation is installed."""

from __future__ import annotations

from typing import Any

import torch

# The real class, kept at install: tests that monkeypatch `torch.device` with a mock (Lightning's
# XLA tests do) must not change what the emulation takes for a device.
Device = torch.device
_backing = Device("cpu")
installed = False  # whether the emulation runs (device.install): then NPU tensors are tracked
current = 0  # the NPU `torch.npu.set_device` chose: where "npu" without an index is
watch: Any = None  # the forecast's recorder (forecast.recorder) where a run asked for one
placed = 0  # tensors put on the emulated NPU so far: whether a test reached it (verify --tests)


def choose(backing: str | None) -> torch.device:
    """The requested backing device, or CUDA when present, else the CPU."""
    global _backing
    _backing = Device(backing or ("cuda" if torch.cuda.is_available() else "cpu"))
    return _backing


def backing() -> torch.device:
    return _backing


def index_of(device: Any) -> int:
    """The device index in `npu:1`, `torch.device("npu", 1)` or `1`; the current device where
    none is given (`x.npu()`, "npu"), as torch_npu places it: each rank on its own device."""
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = Device(device)
    if isinstance(device, Device) and device.index is not None:
        return device.index
    return current


def is_npu(device: Any) -> bool:
    """ "npu", "npu:1", a torch.device of the NPU, and "privateuseone[:N]": the backend's own name,
    which torch still parses as the NPU once torch_npu renames it (mmengine's BaseModel.to
    writes it where torch_npu has no `native_device`)."""
    if isinstance(device, str):
        return device.split(":")[0] in ("npu", "privateuseone")
    return isinstance(device, Device) and device.type == "npu"


def real(device: Any) -> Any:
    """An NPU device (string or torch.device) mapped to the backing device; anything else as is."""
    if not is_npu(device):
        return device
    if _backing.type == "cuda":
        return Device("cuda", index_of(device))
    return _backing
