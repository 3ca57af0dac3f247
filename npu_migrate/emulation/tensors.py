"""Which tensors are on the emulated NPU. A tensor the emulation created or moved there lives on
the backing device and carries a tag (its NPU index): it reports the NPU as its device
(`.device`, `.is_npu`, `.is_cuda`, `.get_device()`), what is computed from it is on the NPU too,
moving it to the host or back copies it, and `.numpy()` refuses it, as on a real NPU. Code that
branches on `x.device.type == "npu"` then takes its NPU branch under the emulation.

Called from the emulation's torch function mode (device.py) for every torch call."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

import torch

from npu_migrate.emulation import state

TAG = "_npu_migrate_index"  # the attribute a tensor on the emulated NPU carries


def index(value: Any) -> int | None:
    return getattr(value, TAG, None) if isinstance(value, torch.Tensor) else None


def on_npu(tensor: torch.Tensor) -> bool:
    """Whether a tensor is on the NPU: tracked where the emulation runs; where its modules are
    used as a library (their unit tests), the backing device is the NPU."""
    return index(tensor) is not None if state.installed else tensor.device.type == state.backing().type


def tag(value: Any, device: int, keep: frozenset[int] = frozenset()) -> None:
    """Put the tensors of `value` (a tensor, or a tuple, list or dict of them) on NPU `device`,
    but for those in `keep` (by id: inputs an in-place op returns, which stay where they are)."""
    for tensor in _tensors(value):
        if id(tensor) not in keep:
            setattr(tensor, TAG, device)
            state.placed += 1


def where_it_came_from(made: torch.Tensor, source: Any) -> None:
    """A tensor torch made from `source` where no mode saw it (`nn.Parameter(t)`, a detach
    inside an op) is on the NPU where `source` is."""
    device = index(source)
    if device is not None:
        tag(made, device)


def untag(tensor: torch.Tensor) -> None:
    if hasattr(tensor, TAG):
        delattr(tensor, TAG)


def live_bytes() -> int:
    """The bytes the tensors on the emulated NPU hold now (their distinct storages, found on the
    heap): what a device's allocator reports as allocated."""
    storages: dict[int, int] = {}
    for found in gc.get_objects():
        if (
            issubclass(type(found), torch.Tensor) and index(found) is not None
        ):  # no attribute of a stranger read
            storage = found.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def first_index(args: tuple, kwargs: dict) -> int | None:
    """The NPU index of the first tensor on the NPU among a call's arguments, or None."""
    for value in (*args, *kwargs.values()):
        for tensor in _tensors(value, depth=1):
            found = index(tensor)
            if found is not None:
                return found
    return None


def _tensors(value: Any, depth: int = 2) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif depth and isinstance(value, tuple | list):
        for item in value:
            yield from _tensors(item, depth - 1)
    elif depth and isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item, depth - 1)


# --------------------------------------------------------------------------- what a call asks for

NPU, HOST = "npu", "host"
_MOVES = frozenset({"to", "cpu", "cuda"})


def target(func: Callable, args: tuple, kwargs: dict) -> tuple[str, int] | None:
    """Where a call puts its result: (NPU, index), (HOST, 0), or None (where its inputs are)."""
    name = getattr(func, "__name__", "")
    if name == "cpu" or name == "cuda":
        return (HOST, 0)
    if "device" in kwargs and kwargs["device"] is not None:
        return _device_target(kwargs["device"])
    if name == "to":
        for value in args[1:]:
            if isinstance(value, torch.Tensor):
                found = index(value)
                return (NPU, found) if found is not None else (HOST, 0)
            # a bool is an int, but in `.to(dtype, True)` it is non_blocking, not a device
            if isinstance(value, str | state.Device | int) and not isinstance(value, bool):
                return _device_target(value)
        return None
    found = next((state.index_of(a) for a in args if state.is_npu(a)), None)
    return (NPU, found) if found is not None else None


def _device_target(device: Any) -> tuple[str, int]:
    if isinstance(device, int):
        device = state.Device(state.backing().type, device)
    return (NPU, state.index_of(device)) if state.is_npu(device) else (HOST, 0)


def place(func: Callable, args: tuple, kwargs: dict, result: Any, where: tuple[str, int] | None) -> Any:
    """The result of a call, on the device it asked for (or its inputs' NPU): a move that
    returned its own input (same backing, so no copy) copies it, as moving to a device does."""
    source = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if where is not None and where[0] == NPU:
        if result is source and index(source) is None:
            result = source.clone()
        tag(result, where[1])
        return result
    if where is not None:  # the host
        if result is source and index(source) is not None:
            result = source.clone()
        if getattr(func, "__name__", "") in _MOVES and isinstance(result, torch.Tensor):
            untag(result)
        return result
    found = first_index(args, kwargs)
    if found is not None:
        inputs = frozenset(id(t) for value in (*args, *kwargs.values()) for t in _tensors(value, depth=1))
        tag(result, found, keep=inputs)
    return result


# --------------------------------------------------------------------------- attributes and refusals


def attribute(func: Callable) -> str | None:
    """The tensor attribute a getter or setter call is about (`device`, `grad`, `data`), or None."""
    if getattr(func, "__name__", "") not in ("__get__", "__set__"):
        return None
    owner = getattr(func, "__self__", None)
    return getattr(owner, "__name__", None) if type(owner).__name__ == "getset_descriptor" else None


def read(name: str, tensor: torch.Tensor, value: Any) -> Any:
    """An attribute of a tensor on the NPU, as a real NPU tensor has it."""
    device = index(tensor)
    if device is None:
        return value
    if name == "device":
        return state.Device("npu", device)
    if name in ("is_cuda", "is_cpu"):
        return False
    if name in ("grad", "data") and isinstance(value, torch.Tensor):
        tag(value, device)  # gradients come from autograd, which the mode does not see
    return value


def type_name(backing: str) -> str:
    """`Tensor.type()` of a tensor on the NPU, from the backing's: torch names a tensor of the
    PrivateUse1 backend `torch.<its name>.<dtype>Tensor` (`torch.npu.BFloat16Tensor`), which
    code written for `torch.cuda.*Tensor` compares with (Megatron's optimizers)."""
    return "torch.npu." + backing.removeprefix("torch.").removeprefix("cuda.")


def written(name: str, tensor: torch.Tensor, value: Any) -> None:
    """After `tensor.data = value` (Module.to): the tensor is where its new data is."""
    if name != "data" or not isinstance(value, torch.Tensor):
        return
    device = index(value)
    if device is None:
        untag(tensor)
    else:
        tag(tensor, device)


_FLOAT8 = frozenset(
    dtype
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
    if (dtype := getattr(torch, name, None)) is not None
)
_MATMULS = frozenset({"_scaled_mm", "_scaled_mm_v2", "matmul", "mm", "bmm", "addmm", "linear", "__matmul__"})


def refused(func: Callable, args: tuple, kwargs: dict[str, Any]) -> Exception | None:
    """The error a real NPU would raise for this call, or None: a tensor on it converted to
    numpy; a float8 matrix product on the SoC the emulation stands in for (an Atlas A2 part,
    npu_module.get_soc_version: torch_npu 2.13's operator docs list float8 matmul inputs for
    the Ascend 950 only, `npu_quant_matmul` int8 and int4-in-int32 on the A2); a fused
    optimizer kernel torch_npu does not register (`fused=True`, below)."""
    name = getattr(func, "__name__", "")
    if name in FUSED_OPTIMIZERS:
        return _fused_step_refused(name, args, kwargs)
    device = index(args[0]) if args else None
    if device is not None and name == "numpy":
        return TypeError(
            f"can't convert npu:{device} device type tensor to numpy. Use Tensor.cpu() to copy the "
            "tensor to host memory first."
        )
    if name in _MATMULS and any(index(a) is not None and a.dtype in _FLOAT8 for a in args[:2]):
        dtypes = ", ".join(
            str(a.dtype).removeprefix("torch.") for a in args[:2] if isinstance(a, torch.Tensor)
        )
        return RuntimeError(
            f"{name}: float8 matrix products are not supported on this NPU (Ascend910B1, an Atlas A2 "
            f"part; torch_npu lists float8 inputs for the Ascend 950 only); got {dtypes}"
        )
    return None


# torch's `fused=True` optimizers call these kernels; torch_npu 2.13 registers all three for the
# NPU (csrc/aten/npu_native_functions_by_codegen.yaml), the tensor-lr overload of two of them
# only (no `_fused_adamw_.tensor_lr`), over aclnn kernels (ApplyAdamWV2, ...) that take float32,
# float16 and bfloat16.
FUSED_OPTIMIZERS = frozenset({"_fused_adam_", "_fused_adamw_", "_fused_sgd_"})
_FUSED_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16})


def _fused_step_refused(name: str, args: tuple, kwargs: dict[str, Any]) -> Exception | None:
    params = [p for p in (args[0] if args else ()) if index(p) is not None]
    if not params:
        return None
    if name == "_fused_adamw_" and isinstance(kwargs.get("lr"), torch.Tensor):
        return NotImplementedError(
            "Could not run 'aten::_fused_adamw_.tensor_lr' with arguments from the 'PrivateUse1' "
            "backend: torch_npu registers _fused_adamw_ for a float lr only (AdamW(fused=True) with "
            "a tensor lr)"
        )
    wrong = sorted({str(p.dtype).removeprefix("torch.") for p in params if p.dtype not in _FUSED_DTYPES})
    if wrong:
        return RuntimeError(
            f"{name}: the NPU's fused optimizer kernel takes float32, float16 and bfloat16 "
            f"parameters; got {', '.join(wrong)}"
        )
    return None
