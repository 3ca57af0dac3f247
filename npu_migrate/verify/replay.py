"""Each module's own code, judged alone: the migrated side calls every module again on the
original side's inputs, with the outputs of the modules it calls replaced by the original's, and
records what that call returns and what it hands the modules it calls. Compared with the
original's, these say which module's code makes a difference, wherever the difference later
shows (a rotary table rounded in the model's `__init__` is the model's, not the first matmul's
past a threshold), and they do not accumulate rounding from module to module (a correct bfloat16
forward drifts past bfloat16's tolerance over a network; no module's own code does)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch

from npu_migrate.verify.capture import ModuleCall, flatten

# (owner module, whether handed, compared key, tensor): what the owner's call returned (its
# `key` + path, as the rows have it) or handed a direct callee (as `inputs` has it)
Replayed = tuple[str, bool, str, torch.Tensor]


class Unreplayable(Exception):
    """The call cannot be made again on the original's tensors (its structure or the original's
    tensors do not fit): its own code goes unjudged, and the end-to-end rows speak for it."""


def rebuild(value: Any, swap: Callable[[str, torch.Tensor], torch.Tensor], path: str = "") -> Any:
    """`value` with each tensor replaced by swap(path, tensor), paths as `capture.flatten` names
    them, the containers kept (a named tuple, a Hugging Face ModelOutput, a dataclass)."""
    if isinstance(value, torch.Tensor):
        return swap(path, value)
    if isinstance(value, Mapping):
        rebuilt = copy.copy(value)
        for key, item in value.items():
            rebuilt[key] = rebuild(item, swap, f"{path}.{key}")  # type: ignore[index]
        return rebuilt
    if isinstance(value, tuple | list):
        items = [rebuild(item, swap, f"{path}[{index}]") for index, item in enumerate(value)]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {
            f.name: rebuild(getattr(value, f.name), swap, f"{path}.{f.name}")
            for f in dataclasses.fields(value)
        }
        return dataclasses.replace(value, **changes)
    return value


def _original(tensors: dict[str, torch.Tensor], key: str, like: torch.Tensor) -> torch.Tensor:
    """The original's tensor under `key`, on `like`'s device and copied (the module may write into
    it), where it fits `like`."""
    tensor = tensors.get(key)
    if tensor is None or tensor.shape != like.shape or tensor.dtype != like.dtype:
        raise Unreplayable(key)
    return tensor.to(like.device, copy=True)


def replay(
    calls: list[ModuleCall],
    inputs: dict[str, torch.Tensor],
    outputs: dict[str, torch.Tensor],
    named: dict[str, torch.nn.Module],
) -> list[Replayed]:
    """Every call replayed on the original's `inputs` (by key and path), the modules it calls
    directly returning the original's `outputs`; calls that cannot be are left out."""
    callees: dict[int, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for call in calls:  # the keys of each call's direct callees, by name, in call order
        if call.parent is not None:
            callees[id(call.parent)][call.name].append(call.key)
    for keys in callees.values():
        for names in keys.values():
            names.sort(key=lambda key: int(key.partition("#")[2] or 1))
    replayed: list[Replayed] = []
    with torch.no_grad():
        for call in calls:
            handed: list[Replayed] = []
            try:
                replayed += _replay(call, inputs, outputs, named, callees[id(call)], handed)
            except Exception:  # the model's code's failure or a misfit: what it returns goes unjudged,
                replayed += handed  # what it handed its callees until then is still its own code's
    return replayed


def _replay(
    call: ModuleCall,
    inputs: dict[str, torch.Tensor],
    outputs: dict[str, torch.Tensor],
    named: dict[str, torch.nn.Module],
    callees: dict[str, list[str]],
    handed: list[Replayed],
) -> list[Replayed]:
    args, kwargs = rebuild(call.given, lambda path, t: _original(inputs, call.key + path, t))
    with _direct_callees(call, named, callees, outputs, handed), contextlib.ExitStack() as context:
        for kind, dtype in call.autocast:  # as the run had it: a Linear under its parent's autocast
            context.enter_context(torch.autocast(kind, dtype=dtype))
        result = call.module(*args, **kwargs)
    returned = [
        (call.name, False, call.key + path, t.detach().to("cpu", copy=True)) for path, t in flatten(result)
    ]
    return returned + handed


@contextmanager
def _direct_callees(
    call: ModuleCall,
    named: dict[str, torch.nn.Module],
    callees: dict[str, list[str]],
    outputs: dict[str, torch.Tensor],
    handed: list[Replayed],
) -> Iterator[None]:
    """Hooks on the modules the call calls: at depth 0 (called by its own code, not by one of
    them), what each is handed is recorded and what it returns is the original's."""
    depth = 0
    made: dict[str, int] = defaultdict(int)
    running: list[str | None] = []

    def enter(name: str) -> Callable[..., None]:
        def hook(module: torch.nn.Module, args: Any, kwargs: Any) -> None:
            nonlocal depth
            key = None
            if depth == 0:
                keys = callees.get(name, [])
                if made[name] >= len(keys):
                    raise Unreplayable(f"{name} called more often than in the run")
                key = keys[made[name]]
                made[name] += 1
                handed.extend(
                    (call.name, True, key + path, t.detach().to("cpu", copy=True))
                    for path, t in flatten((args, kwargs))
                )
            running.append(key)
            depth += 1

        return hook

    def leave(module: torch.nn.Module, args: Any, output: Any) -> Any:
        nonlocal depth
        depth -= 1
        key = running.pop()
        return None if key is None else rebuild(output, lambda path, t: _original(outputs, key + path, t))

    prefix = "" if call.name == "(model)" else call.name + "."
    handles = []
    for name, module in named.items():
        if name.startswith(prefix) and name != call.name and name != "(model)":
            handles.append(module.register_forward_pre_hook(enter(name), with_kwargs=True))
            handles.append(module.register_forward_hook(leave))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
