"""The original's CUDA device names, answered where it runs as the reference without CUDA: a
torch call the tree makes with `device="cuda"` (HunyuanVideo's `get_cu_seqlens` builds its
lengths with `torch.zeros(..., device="cuda")`), `.cuda()` or `.to("cuda")` gets the side's
device instead, at run time (a torch function mode), counted by the call site in the tree. So
does the index `torch.cuda.current_device()` gives (Megatron's `.to(device=torch.cuda.
current_device())`): the function says 0 instead of raising, and an integer device in a `device=`
argument or `.to(i)`, which names a CUDA device, is the side's device."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from npu_migrate.emulation import fast_paths


def _names_cuda(value: Any) -> bool:
    if isinstance(value, str):
        return value.split(":")[0] == "cuda"
    return isinstance(value, torch.device) and value.type == "cuda"


def _index(value: Any) -> bool:
    """An integer device: CUDA's device of that index (the accelerator's, which here is CUDA)."""
    return isinstance(value, int) and not isinstance(value, bool)


class CudaDevices(TorchFunctionMode):
    """Replaces CUDA devices in the arguments of torch calls made from the tree."""

    def __init__(self, root: Path, device: str) -> None:
        super().__init__()
        self.root, self.device = root.resolve(), torch.device(device)
        self.sites: Counter[str] = Counter()
        self._current_device: Any = None
        self._forwards: list[tuple[object, str, Any]] = []

    def __enter__(self) -> CudaDevices:
        self._current_device = torch.cuda.current_device
        torch.cuda.current_device = self._device_index
        patches = fast_paths.patches()  # the fast paths CUDA takes: this mode must not refuse them
        self._forwards = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
        for owner, name, patched in patches:
            setattr(owner, name, patched)
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        torch.cuda.current_device = self._current_device
        for owner, name, forward in self._forwards:
            setattr(owner, name, forward)
        super().__exit__(*exc)

    def _device_index(self) -> int:
        self._answered()
        return 0

    def _answered(self) -> None:
        from npu_migrate.verify.capture import caller_in

        self.sites[caller_in(self.root, sys._getframe(1), past_torch=True) or "(outside the tree)"] += 1

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.Tensor.cuda:
            self._answered()
            return args[0].to(self.device)
        if func is torch.Tensor.to and len(args) > 1 and _index(args[1]):
            args = (args[0], "cuda", *args[2:])
        if _index(kwargs.get("device")):
            kwargs = {**kwargs, "device": "cuda"}
        if any(_names_cuda(a) for a in args) or any(_names_cuda(v) for v in kwargs.values()):
            self._answered()
            if func is torch.device:  # torch.device("cuda", 0)
                return self.device
            args = tuple(self.device if _names_cuda(a) else a for a in args)
            kwargs = {k: self.device if _names_cuda(v) else v for k, v in kwargs.items()}
        return func(*args, **kwargs)

    def described(self) -> list[str]:
        """`path.py:function: N call(s)` for each call site whose CUDA device was answered."""
        return [
            f"{site}: {count} call(s) on cuda run on {self.device.type}" for site, count in self.sites.items()
        ]
