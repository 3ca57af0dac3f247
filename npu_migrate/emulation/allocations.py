"""NPU allocations below the torch function level: code a tensor subclass runs inside its
dispatch (DTensor's RNG tracker moves the NPU's random state `.to("npu")` there), where the
emulation's mode does not run, reaches torch's dispatcher with the "npu" device itself. These
kernels of the NPU's backend key put such a tensor on the backing, on the NPU's books, as the
mode does; every other op then runs as the backing's, the tensor being the backing's."""

from __future__ import annotations

from typing import Any

import torch

from npu_migrate.emulation import state, tensors

_library: torch.library.Library | None = None  # the kernels live as long as their library


def register() -> None:
    """Give "npu" its allocation kernels; once per process."""
    global _library
    if _library is not None:
        return
    library = torch.library.Library("aten", "IMPL")
    library.impl("empty.memory_format", _empty, "PrivateUse1")
    library.impl("empty_strided", _empty_strided, "PrivateUse1")
    _library = library


def _empty(size: Any, *, device: Any = None, pin_memory: Any = None, **options: Any) -> torch.Tensor:
    return _on_the_npu(torch.empty(size, device=state.real(device), **options), device)


def _empty_strided(
    size: Any, stride: Any, *, device: Any = None, pin_memory: Any = None, **options: Any
) -> torch.Tensor:
    return _on_the_npu(torch.empty_strided(size, stride, device=state.real(device), **options), device)


def _on_the_npu(made: torch.Tensor, device: Any) -> torch.Tensor:
    tensors.tag(made, state.index_of(device))
    return made
