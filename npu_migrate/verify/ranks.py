"""One side of `verify --nproc N` as one rank of N under torchrun: the entry has initialised the
process group and wrapped its model (DDP, FSDP, fully_shard) as the trainer does; what the rank
hands the other side and records is gathered where the wrapper shards it, by the parameters'
own names (torch.distributed.checkpoint's state-dict API, which knows every wrapper)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

RANK_FILE = "{stem}.rank{rank}{suffix}"


def rank() -> int:
    """This process's rank in the world torchrun set up (0 outside one)."""
    return int(os.environ.get("RANK", "0"))


def of_rank(path: str, number: int) -> str:
    """A side's file for one rank: `original.pt` -> `original.rank1.pt`."""
    where = Path(path)
    return str(where.with_name(RANK_FILE.format(stem=where.stem, rank=number, suffix=where.suffix)))


def initialised() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def full(tensor: Any) -> Any:
    """A tensor as a whole on this rank: a DTensor (fully_shard's parameters and gradients)
    gathered from every rank, anything else as it is. Every rank calls it in the same order."""
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


# The modules that wrap a user's module to distribute, checkpoint or compile it, and the names
# they put into the names of what they wrap (torch.distributed.checkpoint takes them out too).
WRAPPERS = frozenset(
    {
        "DistributedDataParallel",
        "FullyShardedDataParallel",
        "CheckpointWrapper",
        "OffloadWrapper",
        "OptimizedModule",
    }
)
_WRAPPED = re.compile(r"^module\.|(?:_fsdp_wrapped_module|_checkpoint_wrapped_module|_orig_mod)\.")


def unwrapped(name: str) -> str:
    """A parameter's or module's name as the model has it unwrapped (the state dicts' names):
    `module.0.weight` and `_fsdp_wrapped_module.0.weight` are `0.weight`."""
    return _WRAPPED.sub("", f"{name}.").removesuffix(".")


def named_modules(model: Any) -> list[tuple[str, Any]]:
    """The model's own modules by their unwrapped names, the wrappers left out (each computes
    what the module it wraps does, under the same name): the modules a rank's rows are of."""
    return [(unwrapped(n), m) for n, m in model.named_modules() if type(m).__name__ not in WRAPPERS]


def _options() -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, strict=False)


def model_state(model: Any) -> dict[str, Any]:
    """The model's parameters and buffers, whole, by name without the wrappers' prefixes
    (`0.weight`, not `module.0.weight` or `_fsdp_wrapped_module.0.weight`), on the CPU."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    state = get_model_state_dict(model, options=_options())
    return {name: full(tensor).detach().to("cpu", copy=True) for name, tensor in state.items()}


def load_model_state(model: Any, weights: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Load whole weights into a wrapped model, each rank taking its shard; (missing,
    unexpected) names, as load_state_dict reports them."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    result = set_model_state_dict(model, weights, options=_options())
    return list(result.missing_keys), list(result.unexpected_keys)


def training_state(model: Any, optimizer: Any | None) -> dict[str, Any]:
    """side.training_state of a rank, whole: `parameter NAME`, `buffer NAME` and
    `optimizer NAME.KEY`, by the names the model has unwrapped."""
    import torch
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    buffers = [name for name, _ in model.named_buffers()]  # wrapped: `module.bn.running_mean`

    def kind(name: str) -> str:
        return "buffer" if any(b == name or b.endswith(f".{name}") for b in buffers) else "parameter"

    state = {f"{kind(name)} {name}": tensor for name, tensor in model_state(model).items()}
    if optimizer is None:
        return state
    whole: Any = get_optimizer_state_dict(model, optimizer, options=_options())  # {"state": {name: {}}}
    moments: dict[str, dict[str, Any]] = whole["state"]
    return state | {
        f"optimizer {name}.{key}": full(value).detach().to("cpu", copy=True)
        for name, entries in moments.items()
        for key, value in entries.items()
        if isinstance(value, torch.Tensor)
    }
