"""What one side records while its model runs: every module's outputs (flattened to tensors, in
execution order), per-module activation bytes, and live tensor memory where no device
allocator can say it."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import types
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from npu_migrate.emulation.guards import GuardCounts


def flatten(value: Any, path: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """(path, tensor) for every tensor inside tuples, lists, dicts, dataclasses and Hugging
    Face-style model outputs (which are ordered dicts)."""
    if isinstance(value, torch.Tensor):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from flatten(item, f"{path}.{key}")
    elif isinstance(value, tuple | list):
        for index, item in enumerate(value):
            yield from flatten(item, f"{path}[{index}]")
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from flatten(getattr(value, field.name), f"{path}.{field.name}")


def map_tensors(value: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """`value` with fn applied to each tensor inside its dicts, tuples and lists (in flatten's
    order), the containers rebuilt."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, dict):
        return {k: map_tensors(v, fn) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return type(value)(map_tensors(v, fn) for v in value)
    return value


def nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


@dataclasses.dataclass
class ModuleCall:
    """One call of one module, as msprobe's dump has it (`Module.<name>.<Class>.forward.<index>`)."""

    name: str
    module: torch.nn.Module
    index: int  # this module's calls before this one
    parent: ModuleCall | None  # the call it ran inside
    args: list[torch.Tensor] = dataclasses.field(default_factory=list)  # positional, flattened
    kwargs: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)  # by flattened path
    outputs: list[torch.Tensor] = dataclasses.field(default_factory=list)
    key: str = ""  # the name, with `#N` from its second call on: the rows' and inputs' prefix
    given: tuple[Any, Any] = ((), {})  # the args and kwargs themselves, to call it again (replay)
    autocast: list[tuple[str, torch.dtype]] = dataclasses.field(
        default_factory=list
    )  # in force, by device type
    opened: int = 0  # ComputedIn's operator count when the call began


def autocast_in_force() -> list[tuple[str, torch.dtype]]:
    """The device types autocast is on for, with its dtype (the emulation's runs on the backing
    device's type)."""
    kinds = {"cpu", "cuda", torch._C._get_privateuse1_backend_name()}
    return [
        (kind, torch.get_autocast_dtype(kind)) for kind in sorted(kinds) if torch.is_autocast_enabled(kind)
    ]


class ComputedIn(TorchDispatchMode):
    """The least precise floating dtype the operators compute in, as the program runs (after
    autocast has cast their inputs), since any point of it: each dtype's last operator is
    noted, so a module call's dtype is that of the operators run since it began. A model that
    casts to bfloat16 around an operator (for flash-attn) and back leaves float32 rows carrying
    bfloat16's rounding; verify judges them by it."""

    def __init__(self) -> None:
        super().__init__()
        self.operators = 0
        self._last: dict[torch.dtype, int] = {}  # each floating dtype: the last operator that read it

    def since(self, start: int) -> torch.dtype | None:
        """The coarsest dtype an operator read from operator number `start` on (0: the whole run)."""
        read = (dtype for dtype, last in self._last.items() if last >= start)
        return max(read, key=lambda dtype: torch.finfo(dtype).eps, default=None)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        for _, tensor in flatten((args, kwargs)):
            if tensor.dtype.is_floating_point:
                self._last[tensor.dtype] = self.operators
        self.operators += 1
        return func(*args, **(kwargs or {}))


class ModuleRecorder:
    """Hooks on every module given (a model's named_modules()): its outputs in call order, keyed by
    module name (a module called twice gets `#2`), the tensors it was called with (to tell a
    module whose own code changes the result from one that was handed a different input), and
    the bytes each module's outputs occupy. `calls` holds the same tensors call by call, in the
    order calls finish."""

    def __init__(self, modules: Iterable[tuple[str, torch.nn.Module]]) -> None:
        self.rows: list[tuple[str, str, torch.Tensor]] = []  # (key, module, tensor on the CPU)
        self.inputs: list[tuple[str, str, torch.Tensor]] = []  # (key, module, tensor): what calls got
        self.calls: list[ModuleCall] = []
        self.activation_bytes: dict[str, int] = {}
        # where a row's computation ran in a less precise dtype than the row's own, that dtype:
        # end to end so far (a module output), inside the module's own call (its replay's rows:
        # what it returns, by its key; what it hands a callee, by the callee's input key)
        self.computed_in: dict[str, str] = {}
        self.computed_within: dict[str, str] = {}
        self._calls: dict[str, int] = {}
        self._running: list[ModuleCall] = []
        self.precision = ComputedIn()  # entered around the recorded forward
        self._handles = []
        for name, module in modules:
            name = name or "(model)"
            self._handles.append(module.register_forward_pre_hook(self._enter(name), with_kwargs=True))
            self._handles.append(module.register_forward_hook(self._hook(name)))

    def _key(self, name: str) -> str:
        call = self._calls.get(name, 0)
        return name if call == 1 else f"{name}#{call}"

    def _enter(self, name: str):
        def record(module: torch.nn.Module, args: Any, kwargs: Any) -> None:
            parent = self._running[-1] if self._running else None
            call = ModuleCall(
                name,
                module,
                self._calls.get(name, 0),
                parent,
                given=(args, kwargs),
                autocast=autocast_in_force(),
                opened=self.precision.operators,
            )
            self._calls[name] = call.index + 1
            call.key = self._key(name)
            self._running.append(call)
            for path, tensor in flatten((args, kwargs)):
                copy = tensor.detach().to("cpu", copy=True)
                self.inputs.append((call.key + path, name, copy))
                within = self.precision.since(parent.opened) if parent else None
                self._coarser(self.computed_within, call.key + path, copy, within)
                if path.startswith("[0]"):
                    call.args.append(copy)
                else:
                    call.kwargs[path.removeprefix("[1].")] = copy

        return record

    def _hook(self, name: str):
        def record(module: torch.nn.Module, args: Any, output: Any) -> None:
            while self._running[-1].module is not module:  # a call whose exception the model caught
                self._running.pop()
            call = self._running.pop()
            key = call.key
            for path, tensor in flatten(output):
                copy = tensor.detach().to("cpu", copy=True)
                self.rows.append((key + path, name, copy))
                self._coarser(self.computed_in, key + path, copy, self.precision.since(0))
                self._coarser(self.computed_within, key + path, copy, self.precision.since(call.opened))
                call.outputs.append(copy)
                self.activation_bytes[name] = self.activation_bytes.get(name, 0) + nbytes(tensor)
            self.calls.append(call)

        return record

    @staticmethod
    def _coarser(table: dict[str, str], key: str, tensor: torch.Tensor, dtype: torch.dtype | None) -> None:
        if (
            tensor.is_floating_point()
            and dtype is not None
            and torch.finfo(dtype).eps > torch.finfo(tensor.dtype).eps
        ):
            table[key] = str(dtype).removeprefix("torch.")

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()


class LiveTensorBytes(TorchDispatchMode):
    """Bytes of the tensors that operators create and that are still alive, and their peak:
    the memory figure for sides without a device allocator (the CPU, the emulation)."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        # Tensors counted, by identity: a WeakSet would test membership with Tensor.__eq__, which
        # compares elements (and raises "Boolean value of Tensor ... is ambiguous").
        self._counted: dict[int, int] = {}  # id -> bytes, until the tensor is freed

    def _release(self, key: int) -> None:
        self.live -= self._counted.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        # A result in the storage of an argument is a view or an in-place result: no new memory.
        # (At this level a view has no _base, and a slice of a 4 MiB mask reports 4 MiB of storage.)
        given = {t.untyped_storage().data_ptr() for _, t in flatten((args, kwargs))}
        for _, tensor in flatten(result):
            if tensor.untyped_storage().data_ptr() not in given and id(tensor) not in self._counted:
                size = tensor.untyped_storage().nbytes()
                self._counted[id(tensor)] = size
                self.live += size
                self.peak = max(self.peak, self.live)
                weakref.finalize(tensor, self._release, id(tensor))
        return result


_RANDOM_OPERATORS = frozenset(
    {"rand", "randn", "randint", "randperm", "bernoulli", "normal", "uniform", "random", "exponential",
     "multinomial", "native_dropout", "poisson", "cauchy", "geometric", "log_normal", "rand_like",
     "randn_like", "randint_like"}
)  # fmt: skip


class RandomDraws(TorchDispatchMode):
    """The random operators a run calls: where the forward draws random numbers, the two sides
    agree only as far as they draw alike (a seed is not enough when an operator changed)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__.rstrip("_")
        if name in _RANDOM_OPERATORS:
            self.names.add(name)
        return func(*args, **(kwargs or {}))


_PACKAGE = Path(__file__).resolve().parents[1]  # npu_migrate: its frames are never the caller
_TORCH = Path(torch.__file__).resolve().parent


def caller_in(root: Path, frame: types.FrameType | None, past_torch: bool = False) -> str | None:
    """The caller inside `root` that made a call (`path/in/tree.py:Class.method`), past verify's
    own wrappers (NoDropout wraps the operators in steps) and, with `past_torch`, past torch's
    own code (nn.Dropout's forward calls F.dropout); None where it came from outside the tree."""
    skipped = (_PACKAGE, _TORCH) if past_torch else (_PACKAGE,)
    while frame is not None and any(Path(frame.f_code.co_filename).is_relative_to(s) for s in skipped):
        frame = frame.f_back
    if frame is None or not Path(frame.f_code.co_filename).is_relative_to(root):
        return None
    code = frame.f_code
    name = getattr(code, "co_qualname", code.co_name)  # Python 3.11+ names the class too
    return f"{Path(code.co_filename).relative_to(root).as_posix()}:{name}"


class FusedCalls:
    """How often the migrated side calls each of torch_npu's fused operators (`npu_*`,
    `fast_gelu`), counted by wrapping the module's attributes, which migrated code looks up as
    it calls them: a fused swap the model's code path never reaches is then visible, where an
    agreeing comparison alone would read as proof of it. `sites` counts the calls by caller
    inside `root` (`path/in/tree.py:Class.method`), which names the swap that ran. `guards`:
    what each guarded swap's guard said (emulation.guards), for the tree's modules the entry
    loaded."""

    def __init__(self, module: Any, root: Path) -> None:
        self.module = module
        self.root = root
        self.counts: Counter[str] = Counter()
        self.sites: Counter[str] = Counter()
        self.guards = GuardCounts(root)
        self.guards.counting = False
        self._originals = {
            name: value
            for name, value in vars(module).items()
            if (name.startswith("npu_") or name == "fast_gelu")
            and callable(value)
            and not isinstance(value, type)
        }

    def watch_guards(self) -> None:
        """Count the guards of the tree's modules loaded so far."""
        self.guards.watch_loaded()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Calls made meanwhile are not counted (verify's own replays of the modules)."""
        self.__exit__()
        try:
            yield
        finally:
            self.__enter__()

    def __enter__(self) -> FusedCalls:
        for name, operator in self._originals.items():
            setattr(self.module, name, self._counted(name, operator))
        self.guards.counting = True
        return self

    def __exit__(self, *exc: object) -> None:
        for name, operator in self._originals.items():
            setattr(self.module, name, operator)
        self.guards.counting = False

    def close(self) -> None:
        """Puts the tree's guards back."""
        self.guards.restore()

    def _counted(self, name: str, operator: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.counts[name] += 1
            site = caller_in(self.root, sys._getframe(1))
            if site:
                self.sites[site] += 1
            return operator(*args, **kwargs)

        return counted
