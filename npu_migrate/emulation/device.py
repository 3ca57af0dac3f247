"""Installing the NPU emulation into torch: "npu" becomes a valid device name whose tensors live
on the backing device and report the NPU (emulation.tensors), `torch.npu` answers the device API,
and the tensor and module methods, autocast, gradient scaling, checkpoint loading, pinned memory,
generators, torch.compile and the hccl backend accept "npu"."""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import os
import sys
import types
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._device import DeviceContext, _device_constructors

from npu_migrate.emulation import (
    TRITON_VARIABLE,
    allocations,
    amp,
    fast_paths,
    npu_module,
    settle,
    state,
    tensors,
)

_installed = False


class _NpuDevices(TorchFunctionMode):
    """Maps every "npu" device argument of a torch function or tensor method (factories,
    `Tensor.to`, `new_*`, ...) to the backing device before dispatch, and keeps track of which
    tensors are on the NPU (emulation.tensors): they report it as their device."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        args, kwargs = _accelerator_indices(func, name, args, kwargs)
        if kwargs.get("device") is None and func in _device_constructors():
            kwargs = _default_device(kwargs)
        if func is state.Device or name == "_parse_to":  # "npu:0" stays an NPU device until used
            return func(*args, **kwargs)
        if torch.compiler.is_compiling():  # a traced graph: devices mapped, no tensor tracked
            return func(*_on_backing(args), **_on_backing_keywords(kwargs))
        attribute = tensors.attribute(func)
        if attribute is not None:
            result = func(*args, **kwargs)
            if name == "__get__":
                return tensors.read(attribute, args[0], result)
            tensors.written(attribute, args[0], args[1])
            return result
        refused = tensors.refused(func, args, kwargs)
        if refused is not None:
            raise refused
        if name == "get_device" and args and tensors.index(args[0]) is not None:
            return tensors.index(args[0])
        if name == "type" and len(args) == 1 and not kwargs and tensors.index(args[0]) is not None:
            return tensors.type_name(func(*args))
        where = tensors.target(func, args, kwargs)
        watch = state.watch  # a forecast's recorder: what each call targets, the syncs it makes
        if watch is not None:
            watch.enter(name, args, where)
        try:
            result = func(*_on_backing(args), **_on_backing_keywords(kwargs))
            return tensors.place(func, args, kwargs, result, where)
        finally:
            if watch is not None:
                watch.leave()


_MODE = _NpuDevices()  # on from install to the end of the process


def _default_device(kwargs: dict) -> dict:
    """A factory given no device makes its tensor on torch's default device: where that is the
    NPU (`torch.set_default_device("npu")`), it is named here, so that the tensor is placed as
    an NPU one (torch's own default-device mode may run after this one, and hand "npu" to an
    operator with no kernel of the NPU's backend key: `tril_indices`). Read from torch's mode as
    `torch.get_default_device` reads it, without the tensor it makes to find an index."""
    modes = [m for m in torch.overrides._get_current_function_mode_stack() if isinstance(m, DeviceContext)]
    context = modes[-1] if modes else getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None)
    default = getattr(context, "device", None)
    return {**kwargs, "device": default} if default is not None and state.is_npu(default) else kwargs


def _index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _accelerator_indices(func: Any, name: str, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """An integer device is an index of the current accelerator (torch >= 2.5 resolves it so),
    the NPU's where torch_npu is imported: `x.to(args.gpu)`, `torch.device(0)`, `device=0`."""
    if _index(kwargs.get("device")):
        kwargs = {**kwargs, "device": state.Device("npu", kwargs["device"])}
    if func is state.Device and len(args) == 1 and _index(args[0]):
        args = ("npu", args[0])
    elif name == "to" and len(args) > 1 and _index(args[1]):
        args = (args[0], state.Device("npu", args[1]), *args[2:])
    return args, kwargs


def _on_backing(args: tuple) -> tuple:
    return tuple(state.real(a) for a in args) if any(state.is_npu(a) for a in args) else args


def _on_backing_keywords(kwargs: dict) -> dict:
    if "device" in kwargs and state.is_npu(kwargs["device"]):
        return {**kwargs, "device": state.real(kwargs["device"])}
    return kwargs


def _tensor_npu(
    self: torch.Tensor, device: Any = None, non_blocking: bool = False, **kwargs: Any
) -> torch.Tensor:
    return self.to(state.Device("npu", state.index_of(device)), non_blocking=non_blocking, **kwargs)


def _module_npu(self: torch.nn.Module, device: Any = None) -> torch.nn.Module:
    return self.to(state.Device("npu", state.index_of(device)))


def _engine_under_the_mode(run: Any) -> Any:
    """Backward runs under the mode, as the forward ran: `loss.backward()` (and `autograd.backward`
    or `grad`) reaches the mode, whose handler calls it with the mode popped (torch's
    handle_torch_function), so the Python code backward runs (FSDP's unshard and reduce-scatter,
    DeepSpeed ZeRO's gradient hooks, checkpoint's recompute, custom Functions' backward) would
    otherwise find no NPU: its tensors on the backing, "npu" unknown. The engine is started with
    the mode put back where it is missing."""

    @functools.wraps(run)
    def under(*args: Any, **kwargs: Any) -> Any:
        if _MODE in torch.overrides._get_current_function_mode_stack():
            return run(*args, **kwargs)
        with _MODE:
            return run(*args, **kwargs)

    return under


def _detaching(original: Any) -> Any:
    """Checkpoint's recompute of the forward: its saved-tensor hook detaches what it saves, inside
    an op where no mode sees it; while it runs, a detached tensor is where its source is."""

    @functools.wraps(original)
    def run(*args: Any, **kwargs: Any) -> Any:
        with _detach_keeps_its_device():
            return original(*args, **kwargs)

    return run


@contextlib.contextmanager
def _detach_keeps_its_device() -> Iterator[None]:
    detach = torch.Tensor.detach

    def keeping(self: torch.Tensor) -> torch.Tensor:
        detached = detach(self)
        tensors.where_it_came_from(detached, self)
        return detached

    setattr(torch.Tensor, "detach", keeping)  # noqa: B010  (as an assignment, mypy refuses a method)
    try:
        yield
    finally:
        setattr(torch.Tensor, "detach", detach)  # noqa: B010


def _parameter(original: Any) -> Any:
    """`nn.Parameter(t)` is where `t` is (torch makes it without a torch function the mode sees)."""

    @functools.wraps(original)
    def new(cls: type, data: torch.Tensor | None = None, requires_grad: bool = True) -> torch.Tensor:
        made = original(cls, data, requires_grad)
        tensors.where_it_came_from(made, data)
        return made

    return new


def _load(original: Any) -> Any:
    @functools.wraps(original)
    def load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
        named = isinstance(map_location, str | state.Device)
        on_npu = named and state.is_npu(map_location)
        loaded = original(f, state.real(map_location) if on_npu else map_location, *args, **kwargs)
        if on_npu:
            device = state.index_of(map_location)
            torch.utils._pytree.tree_map_only(torch.Tensor, lambda t: tensors.tag(t, device), loaded)
        elif named:  # saved from the NPU (their tag is pickled with them), loaded to another device
            torch.utils._pytree.tree_map_only(torch.Tensor, tensors.untag, loaded)
        return loaded

    return load


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    """What torch asks the "npu" backend (an available, built device): torch.compile and the
    accelerator API need it registered."""

    def is_available(self) -> bool:
        return True

    def has_primary_context(self, dev_id: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _DeviceGuard(torch._C._acc.DeviceGuard):
    def type_(self) -> Any:
        return torch._C._autograd.DeviceType.PrivateUse1


def _pin_memory(original: Any) -> Any:
    """Pinned host memory is for copies to the device; the backing's (or, on the CPU, none)."""

    @functools.wraps(original)
    def pin_memory(self: torch.Tensor, device: Any = None) -> torch.Tensor:
        if state.backing().type == "cpu":
            return self
        return original(self, state.real(device) if device is not None else state.backing())

    return pin_memory


def _compile(original: Any) -> Any:
    """torch.compile as torch_npu 2.13 has it on a stock Ascend install (no triton-ascend): its
    default Inductor has no code generator for the NPU, so a compiled model called on NPU tensors
    warns "triton-ascend is not installed" and fails in the backend compiler ("Device npu not
    supported", torch_npu/_inductor/__init__.py `_load_triton_backend`), unless Dynamo is told to
    suppress errors (then it runs eagerly); `options={"npu_backend": "mlir"}` needs torch_mlir.
    Other backends (`eager`, `aot_eager`, torch_npu's `npu`) run, and Inductor does where the
    emulated host has triton-ascend (NPU_MIGRATE_TRITON_ASCEND=1). What a compiled graph returns
    is on the NPU its inputs are on, as an operator's result is."""

    @functools.wraps(original)
    def compile(model: Any = None, **options: Any) -> Any:
        if model is None:  # torch.compile(fullgraph=True) as a decorator
            return lambda model: compile(model, **options)
        if (options.get("options") or {}).get("npu_backend") == "mlir":
            raise ImportError("torch_mlir is not installed, install it first.")
        if options.get("backend") in ("npu", "npugraph_ex"):  # torch_npu's TorchAir backends: eagerly here
            options = {**options, "backend": "eager"}
        compiled = original(model, **options)
        triton = os.environ.get(TRITON_VARIABLE) == "1"
        inductor = options.get("backend", "inductor") == "inductor" and not triton
        owner = model if isinstance(model, torch.nn.Module) else getattr(model, "__self__", None)
        if isinstance(compiled, torch.nn.Module):
            if inductor:
                compiled.register_forward_pre_hook(_refuse_inductor(owner), with_kwargs=True)
            compiled.register_forward_hook(
                lambda module, args, kwargs, output: tensors.place(module, args, kwargs, output, None),
                with_kwargs=True,
            )
            return compiled

        @functools.wraps(model)
        def placed(*args: Any, **kwargs: Any) -> Any:
            if inductor and _inductor_on_npu(owner, args, kwargs):
                return model(*args, **kwargs)  # errors suppressed: eager, as Dynamo falls back
            return tensors.place(compiled, args, kwargs, compiled(*args, **kwargs), None)

        return placed

    return compile


_warned_triton = False


def _inductor_on_npu(owner: Any, args: Any, kwargs: Any) -> bool:
    """Refuse Inductor on NPU tensors as torch_npu does without triton-ascend; True where Dynamo
    suppresses the error (the caller runs the model eagerly), False where nothing is on the NPU."""
    global _warned_triton
    given: Iterable[Any] = torch.utils._pytree.tree_leaves((args, kwargs))
    if isinstance(owner, torch.nn.Module):
        given = itertools.chain(given, owner.parameters(), owner.buffers())
    if not any(tensors.index(t) is not None for t in given):  # index: None for what is no tensor
        return False
    if not _warned_triton:
        warnings.warn("triton-ascend is not installed. Please install it first.", stacklevel=3)
        _warned_triton = True
    if torch._dynamo.config.suppress_errors:
        return True
    inner = AssertionError("Device npu not supported")
    raise torch._dynamo.exc.BackendCompilerFailed(_inductor_backend, inner, None)


_inductor_backend = types.SimpleNamespace(__name__="inductor")  # as Dynamo names it: backend='inductor'


def _refuse_inductor(owner: Any) -> Callable[[Any, Any, Any], None]:
    """A compiled module's pre-hook: Inductor refused on NPU tensors (with errors suppressed the
    module runs its compiled graph, computing what eager would)."""

    def hook(module: Any, args: Any, kwargs: Any) -> None:
        _inductor_on_npu(owner, args, kwargs)

    return hook


def _record_stream(original: Any) -> Any:
    """Streams are not emulated (npu_module.Stream: one queue): an NPU tensor has no stream to be
    kept alive for. DDP's input copies and FSDP's resharding record them."""

    @functools.wraps(original)
    def record_stream(self: torch.Tensor, stream: Any) -> None:
        if tensors.index(self) is None:
            original(self, stream)

    return record_stream


class _Generator(torch.Generator):
    """`torch.Generator(device="npu")`: a generator of the backing device."""

    def __new__(cls, device: Any = "cpu") -> _Generator:
        return super().__new__(cls, device=state.real(device) if state.is_npu(device) else device)  # type: ignore[call-arg]


# Every group hccl makes is held here to the end of the process. DDP's reducer can hold the last
# reference to its group and let go of it with the GIL held, while gloo's destructor waits for a
# worker that waits for the GIL to free a collective's tensor (see emulation.settle): a trainer
# that ended hung at exit (py-spy --native).
_gloo_groups: list[Any] = []


def _gloo(store: Any, rank: int, size: int, timeout: Any) -> Any:
    """The process group that "hccl" stands for on the CPU."""
    from torch.distributed.distributed_c10d import ProcessGroupGloo

    group = ProcessGroupGloo(store, rank, size, timeout)
    _gloo_groups.append(group)
    return group


def _register_hccl() -> None:
    """`init_process_group("hccl")` runs on gloo (or nccl on a CUDA backing)."""
    import torch.distributed as dist

    if not dist.is_available() or "hccl" in dist.Backend.backend_list:
        return
    real = "nccl" if state.backing().type == "cuda" else "gloo"
    plugin = dist.Backend._plugins.get(real.upper()) if hasattr(dist.Backend, "_plugins") else None
    dist.Backend.register_backend(
        "hccl", plugin.creator_fn if plugin is not None else _gloo, devices=["cpu", "npu"]
    )
    vars(dist)["is_hccl_available"] = lambda: True
    c10d = dist.distributed_c10d
    setattr(c10d, "BackendConfig", _backend_config(c10d.BackendConfig))  # noqa: B010  (mypy: a class)
    vars(dist)["all_gather_into_tensor"] = _gather_into_any_shape(dist.all_gather_into_tensor)


def _gather_into_any_shape(gather: Any) -> Any:
    """`all_gather_into_tensor` as hccl (and nccl) take it: an output of any shape with room for
    every rank's input (accelerate gathers into a flat one where the backend is not gloo); gloo
    takes only the ranks' inputs concatenated along the first dimension, so that is the view
    it is handed."""
    import torch.distributed as dist

    @functools.wraps(gather)
    def into_any_shape(
        output_tensor: Any, input_tensor: Any, group: Any = None, async_op: bool = False
    ) -> Any:  # torch's parameter names: callers pass them by keyword
        if dist.get_backend(group) == "hccl" and input_tensor.dim() > 0 and output_tensor.is_contiguous():
            rows = dist.get_world_size(group) * input_tensor.shape[0]
            if output_tensor.numel() == rows * math.prod(input_tensor.shape[1:]):
                output_tensor = output_tensor.view(rows, *input_tensor.shape[1:])
        return gather(output_tensor, input_tensor, group, async_op)

    return into_any_shape


def _backend_config(config: Any) -> type:
    """A process group whose backend torch picks for the accelerator (`init_process_group()`
    with no backend, as `init_device_mesh` calls it) gets hccl for "npu" only; on the emulation
    an NPU tensor is a tensor of the backing device, so that backend carries the backing's too."""

    class BackendConfig(config):
        def __init__(self, backend: Any) -> None:
            super().__init__(backend)
            chosen = self.device_backend_map
            if "npu" in chosen and state.backing().type not in chosen:
                chosen[state.backing().type] = chosen["npu"]

    return BackendConfig


def _saved_inputs(frame: Any) -> tuple[Any, Any]:
    """A checkpoint frame's `save_inputs` and `get_inputs`, keeping where each input was: torch
    saves them as SavedTensor objects, and a tensor unpacked from one is a new object, which
    carries no tag."""
    save, get = frame.save_inputs, frame.get_inputs

    def save_inputs(self: Any, *args: Any) -> None:
        save(self, *args)
        self._npu_migrate_indexes = [tensors.index(a) for a in args]

    def get_inputs(self: Any) -> list[Any]:
        inputs = get(self)
        for value, device in zip(inputs, getattr(self, "_npu_migrate_indexes", ()), strict=False):
            if device is not None:
                tensors.tag(value, device)
        return inputs

    return save_inputs, get_inputs


def _checkpoint_metadata(tensor: torch.Tensor) -> dict[str, Any]:
    """Checkpoint's check that a recomputed tensor is the saved one (shape, dtype, device), with
    the device the emulation says (the check runs inside an op, where no mode reads it)."""
    device = tensors.read("device", tensor, tensor.device)
    return {"shape": tensor.shape, "dtype": tensor.dtype, "device": device}


def _engine_runs() -> list[tuple[object, str, object]]:
    """Where torch.autograd's backward and grad start the engine (torch.compiler patches the same
    two names)."""
    import torch.autograd.graph

    under = _engine_under_the_mode(torch.autograd.graph._engine_run_backward)
    return [(module, "_engine_run_backward", under) for module in (torch.autograd, torch.autograd.graph)]


def _recomputations() -> list[tuple[object, str, object]]:
    """Checkpoint's recomputation (torch 2.13's private names: where a torch lacks one, that part
    is left as it is)."""
    import torch.utils.checkpoint as checkpoint

    found: list[tuple[object, str, object]] = []
    if hasattr(checkpoint, "_run_fn_with_dynamo_disabled"):  # use_reentrant=False
        recompute = checkpoint._run_fn_with_dynamo_disabled
        found.append((checkpoint, "_run_fn_with_dynamo_disabled", _detaching(recompute)))
    frame = getattr(checkpoint, "_CheckpointFrame", None)
    if frame is not None and hasattr(frame, "get_inputs"):
        save_inputs, get_inputs = _saved_inputs(frame)
        found += [(frame, "save_inputs", save_inputs), (frame, "get_inputs", get_inputs)]
    checks = getattr(checkpoint, "_allowed_determinism_checks_to_fns", {})
    if "default" in checks:  # what a saved tensor is checked against, read where no mode may be on
        found.append((checks, "default", _checkpoint_metadata))
    return found


_SAVED = "_npu_migrate_saved"  # the NPU index of each tensor a custom Function saved, on its context


def _custom_function_backward() -> list[tuple[object, str, object]]:
    """A custom autograd Function's backward gets new tensors from autograd (its saved outputs
    unpacked, the incoming gradients the engine made where no mode sees them), all on the backing
    device: a backward that checks `x.device` (a fused kernel's guard) would take its host path,
    where on an NPU they are NPU tensors. The context keeps each saved tensor's NPU index; the
    backward's saved tensors and gradients get it back."""
    from torch.autograd.function import BackwardCFunction, FunctionCtx

    save_for_backward = FunctionCtx.save_for_backward
    apply = BackwardCFunction.apply
    unpack = torch._C._FunctionBase.saved_tensors.__get__  # type: ignore[attr-defined]

    def saving(self: Any, *saved: Any) -> None:
        save_for_backward(self, *saved)
        setattr(self, _SAVED, [tensors.index(tensor) for tensor in saved])

    def saved_tensors(self: Any) -> tuple:
        saved = unpack(self)
        for tensor, device in zip(saved, getattr(self, _SAVED, ()), strict=False):
            if device is not None:
                tensors.tag(tensor, device)
        return saved

    def applying(self: Any, *grads: Any) -> Any:
        device = next((found for found in getattr(self, _SAVED, ()) if found is not None), None)
        if device is not None:
            tensors.tag([grad for grad in grads if tensors.index(grad) is None], device)
        return apply(self, *grads)

    return [
        (FunctionCtx, "save_for_backward", saving),
        (BackwardCFunction, "saved_tensors", property(saved_tensors)),
        (BackwardCFunction, "apply", applying),
    ]


def install(backing: str | None = None) -> torch.device:
    """Make "npu" usable in this process; idempotent. Returns the backing device."""
    global _installed
    if _installed:
        return state.backing()
    device = state.choose(backing)
    torch.utils.rename_privateuse1_backend("npu")
    allocations.register()
    torch._register_device_module("npu", npu_module)
    torch._C._acc.register_python_privateuseone_hook(_Hooks())
    torch._C._acc.register_python_privateuseone_device_guard(_DeviceGuard())
    sys.modules.setdefault("torch.npu", npu_module)
    patches: list[tuple[object, str, object]] = [  # what torch's types do not declare: set by name
        (torch.Tensor, "npu", _tensor_npu),
        (torch.Tensor, "is_npu", property(lambda self: tensors.index(self) is not None)),
        (torch.nn.Module, "npu", _module_npu),
        (torch, "autocast", amp.DeviceAutocast),
        (torch.amp, "autocast", amp.DeviceAutocast),
        (torch.amp, "GradScaler", amp.DeviceGradScaler),
        (torch, "load", _load(torch.load)),
        (torch.nn.Parameter, "__new__", _parameter(torch.nn.Parameter.__new__)),
        (torch.Tensor, "pin_memory", _pin_memory(torch.Tensor.pin_memory)),
        (torch.Tensor, "record_stream", _record_stream(torch.Tensor.record_stream)),
        (torch, "compile", _compile(torch.compile)),
        *_recomputations(),
        *fast_paths.patches(),
        *_engine_runs(),
        *_custom_function_backward(),
        (torch, "Generator", _Generator),
    ]
    for owner, name, value in patches:
        if isinstance(owner, dict):
            owner[name] = value
        else:
            setattr(owner, name, value)
    _register_hccl()
    settle.at_exit()
    _MODE.__enter__()
    _installed = state.installed = True
    return device
