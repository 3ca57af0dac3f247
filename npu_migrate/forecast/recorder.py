"""Recording what an emulated process dispatches, for the forecast (analysis.py reads it).

Below torch's Python API, a dispatch mode sees every operator the program really runs after
autograd and composite decomposition: its name and overload, input dtypes and shapes, FLOPs, the
user's line that led to it, whether it ran in backward, and the NPU memory its outputs hold.
The emulation's function mode tells it what each torch call targets (an operator is on the NPU
when its call targets the NPU or, where a call follows its inputs, when an input is there) and
which composite function (`scaled_dot_product_attention`) an operator runs inside: on a device
whose torch_npu registers that function, its parts never run. Module hooks give the module an
operator runs in; steps end at each optimizer step or, in a program without one, at the end of
each outermost module call. Each process leaves one JSON file in the run's folder.

Needs torch; installed by the emulation (`emulation.activate`) where FOLDER_VARIABLE is set."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import sysconfig
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from npu_migrate.emulation import state, tensors
from npu_migrate.forecast import FOLDER_VARIABLE, ROOT_VARIABLE

SYNCS = frozenset(
    {"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "__repr__", "__format__", "numpy"}
)  # tensor methods that read an NPU tensor's value on the host: the device's queue drains first
MOVES_TO_HOST = frozenset({"cpu", "to"})
DATA_DEPENDENT = frozenset(
    {"nonzero", "masked_select", "_unique2", "unique_dim", "unique_consecutive", "argwhere", "nonzero_numpy"}
)  # operators whose output shape depends on the values: the host waits for them, shapes vary
SHAPES_KEPT = 64  # distinct input shapes kept per operator and call site
_STEP_END = "optimizer"


class Recorder:
    """One process's recording; `as_json` is what it leaves."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._files: dict[str, str | None] = {}
        self._mine: set[str] = set()  # the files under the root: the user's own
        self.ops: dict[tuple[str, str, str, bool], dict[str, Any]] = {}
        self.syncs: dict[tuple[str, str], int] = {}  # (kind, site) -> calls
        self.collectives: dict[tuple[str, str, int, str], int] = {}
        self.devices: dict[int, str] = {}  # NPU index -> the first site that ran an operator there
        self.module_flops: dict[str, list[Any]] = {}  # module path -> [class, flops, calls]
        self.module_ops: dict[str, dict[str, int]] = {}  # module path -> its own operators' calls
        self.module_pairs: dict[str, set[tuple[str, str]]] = {}  # module path -> (a, b): b ran right after a
        self._previous: dict[str, str] = {}  # module path -> its last operator in this call
        self.segment = 0
        self.segment_steps: list[int] = []  # per ended segment: the optimizer steps before it
        self.optimizer_steps = 0
        self.memory: list[list[int]] = []  # per ended segment: [peak, live at its end, host RSS]
        self._live: dict[int, tuple[int, str, int]] = {}  # storage -> (bytes, site, segment)
        self._kept: list[tuple[int, str, int]] = []  # what the NPU held at the last step's end
        self._now = 0
        self._peak = 0
        self._calls: list[tuple[str, str]] = []  # the torch calls under way: (target, composite region)
        self._modules: list[str] = []
        self._names: dict[int, str] = {}
        self._regions: dict[str, str] = {}
        self._composite: dict[Any, str] = {}
        self._finished = False
        self.paused = False  # verify's own replays of the modules: not the program's work

    # ------------------------------------------------------------------ where the user's line is

    def _report_name(self, filename: str) -> str | None:
        """A file as findings name it, or None for torch's, the emulation's and the standard
        library's own files (the user's line is further out)."""
        known = self._files.get(filename, "")
        if known != "":
            return known
        name: str | None = None
        path = Path(filename).resolve()
        if not filename.startswith("<") and not _skipped(path):
            if path.is_relative_to(self.root):
                name = path.relative_to(self.root).as_posix()
                self._mine.add(filename)
            else:
                name = _after_site_packages(path)
        self._files[filename] = name
        return name

    def site(self) -> tuple[str, str]:
        """`file:line` of the innermost frame in the user's code, or in a library's followed by
        the user's line that led there (`diffusers/models/attention.py:88 (from infer.py:12)`);
        and the emulated torch_npu operator (`npu_rms_norm`) the call runs inside, or ''."""
        frame = sys._getframe(2)
        found, fused = "", ""
        while frame is not None:
            code = frame.f_code
            if code.co_filename == _FUSED_OPERATORS and not code.co_name.startswith("_"):
                fused = code.co_name  # the outermost public one: what the program called
            name = self._report_name(code.co_filename)
            if name is not None:
                here = f"{name}:{frame.f_lineno}"
                if code.co_filename in self._mine:
                    return (f"{found} (from {here})" if found else here), fused
                found = found or here
            frame = frame.f_back  # type: ignore[assignment]
        return found or "?", fused

    # ------------------------------------------------------------------ torch calls (function mode)

    def enter(self, name: str, args: tuple, where: tuple[str, int] | None) -> None:
        """A torch call starts: what it targets, the composite function it is, a host sync."""
        target = "" if where is None else where[0]
        self._calls.append((target, self._region(name)))
        source = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if self.paused or source is None or tensors.index(source) is None:
            return
        if (name in SYNCS or (name in MOVES_TO_HOST and target == tensors.HOST)) and self._asked_by_user():
            self._sync(name, self.site()[0])

    def _asked_by_user(self) -> bool:
        """Whether the torch call was made outside torch's own code: torch's internal moves
        (`clip_grad_norm_` grouping by the backing's device) are the emulation's, not syncs."""
        frame = sys._getframe(3)
        while frame is not None and frame.f_code.co_filename.startswith(_PASSED):
            frame = frame.f_back  # type: ignore[assignment]
        return frame is not None and not frame.f_code.co_filename.startswith(_OWN)

    def leave(self) -> None:
        self._calls.pop()

    def _region(self, name: str) -> str:
        """The aten operator a torch function is, where it is a composite torch decomposes on
        the backing (a device registering it runs it whole); else ''."""
        found = self._regions.get(name)
        if found is None:
            packet = getattr(torch.ops.aten, name, None) if name.isidentifier() else None
            overloads = packet.overloads() if isinstance(packet, torch._ops.OpOverloadPacket) else ()
            found = name if any(_has_kernel(name, o, "CompositeImplicitAutograd") for o in overloads) else ""
            self._regions[name] = found
        return found

    def _sync(self, kind: str, site: str) -> None:
        self.syncs[(kind, site)] = self.syncs.get((kind, site), 0) + 1

    # ------------------------------------------------------------------ operators (dispatch mode)

    def operator(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        if self.paused:
            return
        inputs = list(_tensors_of(args, kwargs))
        target, region = self._calls[-1] if self._calls else ("", "")
        device = next((d for t in inputs if (d := tensors.index(t)) is not None), None)
        if target == tensors.HOST or (target != tensors.NPU and device is None):
            return
        device = state.current if device is None else device
        site, fused = self.site()
        if site == "?":
            return  # no frame of the program's: the tool's own hooks (verify's), torch's threads
        self.devices.setdefault(device, site)
        name, overload = (f"npu::{fused}", "default") if fused else (func._schema.name, func._overloadname)
        if name.startswith("c10d::"):
            self._collective(name, args, inputs, site)
        backward = torch._C._current_autograd_node() is not None
        if backward:
            site += " (backward)"  # the line that started it: autograd runs the graph from there
        key = (f"{name}.{overload}", "" if backward else region, site, backward)
        record = self.ops.get(key)
        if record is None:
            record = self.ops[key] = {"calls": 0, "flops": 0, "signatures": {}}
            record["composite"] = "" if fused else self._composite_kind(func)
            record["view"] = not fused and func.is_view  # a view computes nothing
        record["calls"] += 1
        flops = self._signature_seen(record, func, args, kwargs, out, inputs)
        record["flops"] += flops
        short = name.partition("::")[2]
        if short in DATA_DEPENDENT or (short in ("index", "index_put_") and _bool_index(args)):
            record["data_dependent"] = True
        if not backward:
            module = self._modules[-1] if self._modules else "(no module)"
            ops = self.module_ops.setdefault(module, {})
            ops[short] = ops.get(short, 0) + 1
            if not record["view"]:  # which operator follows which in the module's own code
                previous = self._previous.get(module)
                if previous is not None:
                    self.module_pairs.setdefault(module, set()).add((previous, short))
                self._previous[module] = short
            if flops:
                self.module_flops.setdefault(module, ["", 0, 0])[1] += flops
        if record["view"]:
            tensors.tag(out, device)  # the input's storage: nothing new held
        else:
            self._held(out, inputs, device, site)

    def _signature_seen(
        self,
        record: dict[str, Any],
        func: Any,
        args: tuple,
        kwargs: dict,
        out: Any,
        inputs: list[torch.Tensor],
    ) -> int:
        """Count the call under its inputs' dtypes and shapes; its FLOPs (worked out once per
        signature: the same shapes cost the same)."""
        signatures = record["signatures"]
        signature = tuple((t.dtype, t.shape) for t in inputs)
        seen = signatures.get(signature)
        if seen is not None:
            seen[1] = self.segment
            seen[2] += 1
            return int(seen[3])
        flops = self._flops(func, args, kwargs, out)
        if len(signatures) < SHAPES_KEPT:
            signatures[signature] = [self.segment, self.segment, 1, flops]
        return flops

    def _composite_kind(self, func: Any) -> str:
        """How an operator without an NPU kernel of its own still runs there: "explicit" (torch
        decomposes it for every backend, implicitly or explicitly), "structured" (a structured
        kernel's functional form: it calls its out= variant, which the NPU may register), or ""."""
        found = self._composite.get(func)
        if found is None:
            name = func.name()
            has = torch._C._dispatch_has_kernel_for_dispatch_key
            found = ""
            if has(name, "CompositeExplicitAutograd") or has(name, "CompositeImplicitAutograd"):
                found = "explicit"  # (an implicit one is seen whole where autograd is off: inference_mode)
            elif has(name, "CompositeExplicitAutogradNonFunctional"):  # a structured kernel's
                found = "structured" if has(name, "CPU") else "explicit"  # or a real decomposition
            self._composite[func] = found
        return found

    @staticmethod
    def _flops(func: Any, args: tuple, kwargs: dict, out: Any) -> int:
        count = flop_registry.get(func.overloadpacket)
        if count is None:
            return 0
        try:
            return int(count(*args, **kwargs, out_val=out))
        except Exception:  # an odd call the counter does not take: no FLOPs known
            return 0

    def _collective(self, name: str, args: tuple, inputs: list[torch.Tensor], site: str) -> None:
        group = next((a for a in args if hasattr(a, "size") and hasattr(a, "rank")), None)
        size = group.size() if group is not None else 0
        dtypes = ",".join(sorted({str(t.dtype).removeprefix("torch.") for t in inputs}))
        key = (name.removeprefix("c10d::").rstrip("_"), dtypes, size, site)
        self.collectives[key] = self.collectives.get(key, 0) + 1

    # ------------------------------------------------------------------ NPU memory

    def _held(self, out: Any, inputs: list[torch.Tensor], device: int, site: str) -> None:
        """Put the operator's outputs on the NPU and count the storages they hold there."""
        known = frozenset(id(t) for t in inputs)
        for tensor in _tensors_of((out,), {}):
            if id(tensor) in known:
                continue
            if tensors.index(tensor) is None:
                tensors.tag(tensor, device)
            storage = tensor.untyped_storage()
            key = storage.data_ptr()
            if key == 0 or key in self._live:
                continue
            size = storage.nbytes()
            self._live[key] = (size, site, self.segment)
            weakref.finalize(storage, self._freed, key)
            self._now += size
            self._peak = max(self._peak, self._now)

    def _freed(self, key: int) -> None:
        held = self._live.pop(key, None)
        if held is not None:
            self._now -= held[0]

    # ------------------------------------------------------------------ modules and steps

    def module_called(self, module: torch.nn.Module) -> None:
        if self.paused:
            return
        name = self._names.get(id(module))
        if name is None:
            root = type(module).__name__
            if self._modules:
                name = f"{self._modules[-1]}.{root}"
                self._names[id(module)] = name
            else:
                for path, child in module.named_modules():
                    self._names.setdefault(id(child), f"{root}.{path}" if path else root)
                name = self._names[id(module)]
        self._modules.append(name)
        self._previous.pop(name, None)
        entry = self.module_flops.setdefault(name, [type(module).__name__, 0, 0])
        entry[0] = type(module).__name__
        entry[2] += 1

    def module_returned(self) -> None:
        if self.paused:
            return
        if self._modules:
            self._modules.pop()
        if not self._modules and not self.optimizer_steps:
            self.end_segment()

    def optimizer_stepped(self) -> None:
        self.optimizer_steps += 1
        self.end_segment()

    def end_segment(self, boundary: bool = True) -> None:
        """A step (or part of one) ends; at a boundary the program draws, what the NPU holds is
        kept with where it was made (the program's own objects are gone by the time it exits)."""
        if boundary:
            self._kept = list(self._live.values())
        self.memory.append([self._peak, self._now, _host_bytes()])
        self.segment_steps.append(self.optimizer_steps)
        self.segment += 1
        self._peak = self._now

    # ------------------------------------------------------------------ what a process leaves

    def as_json(self) -> dict[str, Any]:
        if self._peak > self._now or not self.memory:
            self.end_segment(boundary=False)
        rank, local = os.environ.get("RANK", ""), os.environ.get("LOCAL_RANK", "")
        return {
            "rank": int(rank) if rank.isdigit() else None,
            "local_rank": int(local) if local.isdigit() else None,
            "world_size": int(os.environ.get("WORLD_SIZE", "1") or 1),
            "devices": {str(index): site for index, site in self.devices.items()},
            "step_kind": _STEP_END if self.optimizer_steps else "module call",
            "segment_steps": self.segment_steps,
            "memory": self.memory,
            "held": [[size, site, segment] for size, site, segment in self._kept],
            "ops": [
                {
                    "op": op,
                    "region": region,
                    "site": site,
                    "backward": backward,
                    "calls": record["calls"],
                    "flops": record["flops"],
                    "composite": record["composite"],
                    "view": record["view"],
                    "data_dependent": record.get("data_dependent", False),
                    "dtypes": sorted({_dtype_names(signature) for signature in record["signatures"]}),
                    "shapes": _by_shape(record["signatures"]),
                }
                for (op, region, site, backward), record in self.ops.items()
            ],
            "syncs": [[kind, site, calls] for (kind, site), calls in self.syncs.items()],
            "collectives": [[*key, calls] for key, calls in self.collectives.items()],
            "modules": self.module_flops,
            "module_ops": self.module_ops,
            "module_pairs": {
                name: sorted(f"{a}>{b}" for a, b in pairs) for name, pairs in self.module_pairs.items()
            },
        }

    def finish(self, folder: Path) -> None:
        """Leave the recording in the run's folder; once."""
        if self._finished or not folder.is_dir():
            return
        self._finished = True
        _MODE.__exit__(None, None, None)
        text = json.dumps(self.as_json())
        (folder / f"{os.getpid()}.json").write_text(text, encoding="utf-8")


class _Watch(TorchDispatchMode):
    """Sees each operator below autograd and hands it, once run, to the recorder."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """No dynamo wrapper around the handler: it would import torch._dynamo (a second of a
        short run) and add a call to every operator; the handler compiles nothing."""
        return False

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if ACTIVE is not None:
            ACTIVE.operator(func, args, kwargs, out)
        return out


_MODE = _Watch()
ACTIVE: Recorder | None = None
_LIBRARIES = frozenset({"site-packages", "dist-packages"})
_FUSED_OPERATORS = str(Path(__file__).parents[1] / "emulation" / "ops.py")  # the emulated torch_npu operators
_OWN = tuple(
    str(folder.resolve()) + os.sep for folder in (Path(torch.__file__).parent, Path(__file__).parents[1])
)
_PASSED = (
    str(Path(__file__).parents[1] / "emulation") + os.sep,
    *(  # what stands between a call and the mode
        str((Path(torch.__file__).parent / name).resolve())
        for name in ("overrides.py", "_tensor.py", "_tensor_str.py")
    ),
)
_STDLIB = str(Path(sysconfig.get_paths()["stdlib"]).resolve()) + os.sep


def _skipped(path: Path) -> bool:
    """torch's and the emulation's files, and the standard library's (not the libraries
    installed inside it)."""
    text = str(path)
    return text.startswith(_OWN) or (text.startswith(_STDLIB) and not _LIBRARIES.intersection(path.parts))


def start_if_asked() -> None:
    """Where the run asked for a forecast, record this process from now on."""
    global ACTIVE
    folder = os.environ.get(FOLDER_VARIABLE)
    if not folder or ACTIVE is not None:
        return
    ACTIVE = Recorder(Path(os.environ.get(ROOT_VARIABLE) or os.getcwd()))
    state.watch = ACTIVE
    register_module_forward_pre_hook(lambda module, args: ACTIVE.module_called(module))
    register_module_forward_hook(lambda module, args, out: ACTIVE.module_returned())
    register_optimizer_step_post_hook(lambda *_: ACTIVE.optimizer_stepped())
    _MODE.__enter__()
    atexit.register(ACTIVE.finish, Path(folder))


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Nothing done meanwhile is recorded (verify's replays); nothing to do where none records."""
    if ACTIVE is None:
        yield
        return
    ACTIVE.paused = True
    try:
        yield
    finally:
        ACTIVE.paused = False


def finish() -> None:
    """Leave this process's recording now (the CLI's own process, before it reads them all)."""
    folder = os.environ.get(FOLDER_VARIABLE)
    if ACTIVE is not None and folder:
        ACTIVE.finish(Path(folder))


def _has_kernel(name: str, overload: str, key: str) -> bool:
    """Whether aten's `name.overload` has a kernel for dispatch key `key` (False where the
    dispatcher has no such operator: a TorchScript builtin such as `__getitem__`)."""
    full = f"aten::{name}" + ("" if overload == "default" else f".{overload}")
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(full, key)
    except RuntimeError:
        return False


def _dtype_names(signature: tuple) -> tuple[str, ...]:
    return tuple(str(dtype).removeprefix("torch.") for dtype, _ in signature)


def _by_shape(signatures: dict[tuple, list[int]]) -> list[list[Any]]:
    """[shapes, first segment, last segment, calls] per distinct input shapes (dtypes merged)."""
    merged: dict[tuple, list[int]] = {}
    for signature, (first, last, calls, _flops) in signatures.items():
        shape = tuple(tuple(size) for _, size in signature)
        known = merged.setdefault(shape, [first, last, 0])
        known[0], known[1], known[2] = min(known[0], first), max(known[1], last), known[2] + calls
    return [[list(map(list, shape)), *seen] for shape, seen in merged.items()]


def _tensors_of(args: tuple, kwargs: dict) -> Iterator[torch.Tensor]:
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, list | tuple):
            yield from (item for item in value if isinstance(item, torch.Tensor))


def _bool_index(args: tuple) -> bool:
    indices = args[1] if len(args) > 1 and isinstance(args[1], list | tuple) else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices)


def _after_site_packages(path: Path) -> str:
    parts = path.parts
    for marker in _LIBRARIES:
        if marker in parts:
            return "/".join(parts[parts.index(marker) + 1 :])
    return str(path)


def _host_bytes() -> int:
    """This process's resident memory (Linux), or 0."""
    try:
        pages = Path("/proc/self/statm").read_text().split()[1]
    except (OSError, IndexError):
        return 0
    return int(pages) * os.sysconf("SC_PAGE_SIZE")
