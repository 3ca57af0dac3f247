"""verify's captures written as msprobe dumps (mindstudio-probe's task "tensor", level "L0"), so
that `msprobe compare` and the precision engineer's own tools read both sides:

    DIR/step0/rank0/dump.json          {"task", "level", "framework", "dump_data_dir", "data": {op: call}}
    DIR/step0/rank0/construct.json     {op: the op it ran inside, or null}
    DIR/step0/rank0/dump_tensor_data/  <op>.input.<i>.pt, <op>.output.<i>.pt, <op>.parameters.<name>.pt

with op = `Module.<name>.<Class>.forward.<index>`, in the order calls finish, as msprobe writes
them. Like msprobe's L0, the model itself is not an op (its submodules are); nested inputs and
outputs are flattened to one list, alike on both sides."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

from npu_migrate.verify.capture import ModuleCall

PATH_CHARACTERS = re.compile(r"[a-zA-Z0-9_.:/-]+")  # all msprobe accepts in a file's path


def write_dump(folder: Path, calls: list[ModuleCall]) -> None:
    rank = folder / "step0" / "rank0"
    tensors = rank / "dump_tensor_data"
    tensors.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {}
    construct: dict[str, str | None] = {}
    for call in calls:
        if call.parent is None:  # the model itself
            continue
        op = _op(call)

        def entry(tensor: torch.Tensor, part: str, op: str = op) -> dict[str, Any]:
            return _save(tensor, f"{op}.{part}.pt", tensors)

        data[op] = {
            "input_args": [entry(t, f"input.{i}") for i, t in enumerate(call.args)],
            "input_kwargs": {_safe(k): entry(t, f"input.{_safe(k)}") for k, t in call.kwargs.items()},
            "output": [entry(t, f"output.{i}") for i, t in enumerate(call.outputs)],
            "parameters": {
                name: entry(p.detach().to("cpu", copy=True), f"parameters.{name}")
                for name, p in call.module.named_parameters(recurse=False)
            },
        }
        construct[op] = None if call.parent.parent is None else _op(call.parent)
    dump = {
        "task": "tensor",
        "level": "L0",
        "framework": "pytorch",
        "dump_data_dir": str(tensors.resolve()),
        "data": data,
    }
    (rank / "dump.json").write_text(json.dumps(dump, indent=1), encoding="utf-8")
    (rank / "construct.json").write_text(json.dumps(construct, indent=1), encoding="utf-8")


def _op(call: ModuleCall) -> str:
    return f"Module.{call.name}.{type(call.module).__name__}.forward.{call.index}"


def _safe(path: str) -> str:
    """A flattened path (`.cache[0]`) as msprobe's names allow (`cache.0`)."""
    return re.sub(r"[^a-zA-Z0-9_]+", ".", path).strip(".") or "value"


def _save(tensor: torch.Tensor, name: str, folder: Path) -> dict[str, Any]:
    torch.save(tensor.contiguous(), folder / name)
    return {
        "type": "torch.Tensor",
        "dtype": str(tensor.dtype),
        "shape": list(tensor.shape),
        **_statistics(tensor),
        "requires_grad": tensor.requires_grad,
        "data_name": name,
    }


def _statistics(tensor: torch.Tensor) -> dict[str, Any]:
    """msprobe's summary columns: max, min, mean and L2 norm (the last two for floats only)."""
    if tensor.is_complex():
        tensor = tensor.abs()
    if tensor.numel() == 0:
        return {"Max": None, "Min": None, "Mean": None, "Norm": None}
    if tensor.dtype == torch.bool:
        return {"Max": bool(tensor.any()), "Min": bool(tensor.all()), "Mean": None, "Norm": None}
    if not tensor.is_floating_point():
        return {"Max": tensor.max().item(), "Min": tensor.min().item(), "Mean": None, "Norm": None}
    values = tensor.float()
    return {
        "Max": values.max().item(),
        "Min": values.min().item(),
        "Mean": values.mean().item(),
        "Norm": torch.linalg.vector_norm(values).item(),
    }
