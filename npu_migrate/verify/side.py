"""One side of `verify`, run as its own process: build the user's model from the entry in its
own tree, run it (forward with module hooks, then optional training steps) and save what it saw.

    python -m npu_migrate.verify.side REQUEST.json

The original side also saves its weights and inputs, so the migrated side starts identically."""

from __future__ import annotations

import contextlib
import faulthandler
import importlib.util
import json
import platform
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from npu_migrate.emulation import settle
from npu_migrate.verify import ranks
from npu_migrate.verify.protocol import SideReport, SideRequest, Step, WeightSource

EXIT_USER_ERROR = 3  # the user's code failed; the message is on stderr
EXIT_TOOL_ERROR = 4  # npu-migrate's own code failed (a bug of ours); the traceback is on stderr
PACKAGE = Path(__file__).resolve().parent.parent
EMULATION = PACKAGE / "emulation"
STAND_INS = PACKAGE / "verify" / "stand_ins"
ANSWERING = ("cuda_devices.py", "cuda_asserts.py")  # the stand-ins' wrappers around the user's own calls


class EntryError(Exception):
    """The entry does not keep the contract; the message says how."""


def load_entry(tree: Path, entry: str, loader: Callable[[str, str], Any] | None = None) -> Any:
    """The entry function, its file loaded as a module (by `loader(name, path)` if given)."""
    file, _, func = entry.partition(":")
    path = tree / file
    if not func:
        raise EntryError(f"--entry must be FILE:FUNC, got {entry!r}")
    if not path.is_file():
        raise EntryError(f"no entry file {file} in {tree}")
    sys.path.insert(0, str(tree))
    made = loader(path.stem, str(path)) if loader else None
    spec = importlib.util.spec_from_file_location(path.stem, path, loader=made)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    if not callable(getattr(module, func, None)):
        raise EntryError(f"{file} has no function {func}()")
    return getattr(module, func)


def unpack(result: Any) -> dict[str, Any]:
    """The entry's result as {model, inputs, loss_fn, optimizer}."""
    import torch

    if isinstance(result, tuple | list):
        result = dict(zip(("model", "inputs", "loss_fn", "optimizer"), result, strict=False))
    if not isinstance(result, dict) or "model" not in result or "inputs" not in result:
        raise EntryError(
            "the entry must return (model, inputs[, loss_fn[, optimizer]]) or a dict with those keys"
        )
    if not isinstance(result["model"], torch.nn.Module):
        raise EntryError(f"the entry's model is a {type(result['model']).__name__}, not a torch.nn.Module")
    if not isinstance(result["inputs"], tuple | list | dict):
        raise EntryError(
            "the entry's inputs must be a tuple of positional arguments or a dict of keyword arguments"
        )
    return {"loss_fn": None, "optimizer": None, **result}


def call(model: Any, inputs: Any) -> Any:
    return model(**inputs) if isinstance(inputs, dict) else model(*inputs)


def user_traceback(exc: BaseException, tree: Path) -> str:
    """The traceback cut down to the frames in the user's tree (what they can act on)."""
    root = tree.resolve()
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if Path(f.filename).is_absolute() and Path(f.filename).resolve().is_relative_to(root)
    ]
    lines = traceback.format_list(frames) if frames else []
    return "".join(lines) + "".join(traceback.format_exception_only(type(exc), exc)).rstrip()


def failure(exc: BaseException, tree: Path) -> tuple[int, str]:
    """Exit code and message for an exception: whose code raised it decides. The innermost
    frame in npu-migrate or in the user's tree (torch's and Python's own are passed over) is in
    the tool (a bug of ours: the whole traceback), in the NPU emulation or a CUDA library's
    stand-in (said so, with the user's frames), or in the user's code (their frames)."""
    root = tree.resolve()
    if isinstance(exc, SyntaxError) and exc.filename and Path(exc.filename).resolve().is_relative_to(root):
        return EXIT_USER_ERROR, user_traceback(exc, tree)  # their file does not parse: no frame of theirs
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = Path(frame.filename)
        if not path.is_absolute():
            continue
        path = path.resolve()
        if path.is_relative_to(root):
            break
        if path.is_relative_to(EMULATION):
            return EXIT_USER_ERROR, (
                f"the NPU emulation stopped this call ({path.name}:{frame.lineno}): what it says a real "
                f"NPU would reject, or an operation it does not emulate\n{user_traceback(exc, tree)}"
            )
        if path.is_relative_to(STAND_INS) and path.name in ANSWERING:
            continue  # passes the call on: whoever it called raised
        if path.is_relative_to(STAND_INS) and not isinstance(exc, (AttributeError, TypeError, NameError)):
            return EXIT_USER_ERROR, (
                f"a CUDA library's stand-in refused this call ({path.name}:{frame.lineno}), as the "
                f"library itself would, or does not cover it\n{user_traceback(exc, tree)}"
            )
        if path.is_relative_to(PACKAGE):
            whole = "".join(traceback.format_exception(exc)).rstrip()
            return (
                EXIT_TOOL_ERROR,
                f"npu-migrate itself failed here, not your code (please report it):\n{whole}",
            )
    return EXIT_USER_ERROR, user_traceback(exc, tree)


def map_weights(original: dict[str, Any], sources: dict[str, WeightSource]) -> dict[str, Any]:
    """The original weights with the tensors `--weights-map` builds for the migrated model (the
    original tensors it reads are taken out)."""
    import torch

    weights = dict(original)
    for name, source in sources.items():
        missing = [n for n in source.names if n not in original]
        if missing:
            raise EntryError(f"--weights-map: {name} reads {missing[0]}, which the original weights lack")
        tensor = torch.cat([original[n] for n in source.names], dim=source.dim)
        weights[name] = tensor.t().contiguous() if source.transpose else tensor
        for used in source.names:
            if used != name:
                weights.pop(used, None)
    return weights


def fuse_weights(original: dict[str, Any], migrated: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The original weights, paired with a migrated model whose tree fuses modules: a tensor only
    the migrated model has (`attn.qkv.weight`) is the concatenation, along its first dimension,
    of the tensors of the same name that only the original has under the same parent module
    (`attn.q_proj.weight`, `attn.k_proj.weight`, `attn.v_proj.weight`, in the original's order),
    where their shapes add up to it exactly. Returns the weights and what was fused, in words."""
    import torch

    weights = dict(original)
    spare = [name for name, value in original.items() if name not in migrated and torch.is_tensor(value)]
    fused = []
    for name, target in migrated.items():
        if name in original or "." not in name or not torch.is_tensor(target):
            continue
        parent, _, leaf = name.rpartition(".")
        parent = parent.rpartition(".")[0]
        parts = [
            n
            for n in spare
            if n.rpartition(".")[2] == leaf
            and n.rpartition(".")[0].rpartition(".")[0] == parent
            and original[n].shape[1:] == target.shape[1:]
        ]
        if len(parts) > 1 and sum(original[n].shape[0] for n in parts) == target.shape[0]:
            weights[name] = torch.cat([original[n] for n in parts])
            spare = [n for n in spare if n not in parts]
            for n in parts:
                del weights[n]
            fused.append(f"{name} = concatenation of {', '.join(parts)}")
    return weights, fused


def _tensors_like(value: Any, originals: Any) -> Any:
    """`value` with its tensors replaced, in order, by the original side's (on value's device)."""
    from npu_migrate.verify.capture import flatten, map_tensors

    replacements = iter(t for _, t in flatten(originals))
    return map_tensors(value, lambda tensor: next(replacements).to(tensor.device))


def _to(value: Any, device: Any) -> Any:
    from npu_migrate.verify.capture import map_tensors

    return map_tensors(value, lambda tensor: tensor.to(device))


def _memory(device: Any) -> Any:
    """Peak-memory readings: the device allocator where there is one, else live tensor bytes."""
    import torch

    from npu_migrate.verify.capture import LiveTensorBytes

    backend = {"cuda": getattr(torch, "cuda", None), "npu": getattr(torch, "npu", None)}.get(device.type)
    if backend is not None and hasattr(backend, "max_memory_allocated") and not _emulated():
        return _DeviceMemory(backend)
    return LiveTensorBytes()


def _backing(device: Any) -> str:
    """The hardware that computes: the device's type, or for the emulation what it runs on."""
    if _emulated():
        from npu_migrate.emulation import state

        return state.backing().type
    return str(device.type)


def _emulated() -> bool:
    torch_npu = sys.modules.get("torch_npu")
    return torch_npu is not None and "emulated" in getattr(torch_npu, "__version__", "")


class _DeviceMemory:
    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.peak = 0

    def __enter__(self) -> _DeviceMemory:
        self.backend.synchronize()
        self.backend.reset_peak_memory_stats()
        return self

    def __exit__(self, *exc: object) -> None:
        self.backend.synchronize()
        self.peak = int(self.backend.max_memory_allocated())


def _timed(fn: Any, repeat: int = 5) -> float:
    """Median milliseconds of fn()."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return sorted(times)[len(times) // 2]


def run(request: SideRequest) -> SideReport:
    """One side's run; the migrated side's fused operator calls are counted in its forwards and
    steps (not in its replays)."""
    from npu_migrate.verify.capture import FusedCalls

    if request.role != "migrated":
        return _original(request)
    import torch_npu  # the real one, or the emulation's stand-in (on PYTHONPATH)

    from npu_migrate.forecast import recorder

    @contextlib.contextmanager
    def uncounted() -> Iterator[None]:
        with fused.paused(), recorder.paused():  # verify's own replays: not the program's calls
            yield

    with FusedCalls(torch_npu, Path(request.tree).resolve()) as fused:
        try:
            report = _run(request, uncounted, fused.watch_guards)
        finally:
            fused.close()
    report.fused_calls = dict(sorted(fused.counts.items()))
    report.fused_sites = dict(sorted(fused.sites.items()))
    report.guarded = {
        site: dict(outcomes.most_common()) for site, outcomes in sorted(fused.guards.sites.items())
    }
    return report


def _original(request: SideRequest) -> SideReport:
    """The reference run: where it has no CUDA, the CUDA-only libraries it imports are the
    plain-torch stand-ins, and its asserts that tensors are on CUDA and the CUDA devices it
    names are answered with the side's device (all listed in the report)."""
    from npu_migrate.verify import stand_ins
    from npu_migrate.verify.stand_ins.cuda_asserts import CudaAsserts

    on_cuda = request.device.startswith("cuda")
    libraries = stand_ins.install(request.stand_ins, real_first=on_cuda)
    if on_cuda:
        report = _run(request, contextlib.nullcontext)
    else:
        from npu_migrate.verify.stand_ins.cuda_devices import CudaDevices

        asserts = CudaAsserts(Path(request.tree)).install()
        with CudaDevices(Path(request.tree), request.device) as devices:
            report = _run(request, contextlib.nullcontext, loader=asserts.loader)
        report.answered = asserts.answered + devices.described()
    report.stand_ins = stand_ins.described(libraries.imported)
    return report


def _run(
    request: SideRequest,
    uncounted: Callable[[], AbstractContextManager[Any]],
    loaded: Callable[[], None] = lambda: None,
    loader: Callable[[str, str], Any] | None = None,
) -> SideReport:
    import torch

    from npu_migrate.verify.capture import ModuleRecorder, RandomDraws, flatten, nbytes

    tree = Path(request.tree)
    torch.manual_seed(0)
    parts = unpack(load_entry(tree, request.entry, loader)())
    loaded()  # the tree's modules are imported: their guards can be watched
    model, inputs = parts["model"], parts["inputs"]
    device = torch.device(request.device)
    distributed = request.nproc > 0  # one rank of N: the entry placed and wrapped the model
    if distributed and not ranks.initialised():
        raise EntryError(
            "with --nproc the entry initialises the process group in every rank "
            "(torch.distributed.init_process_group), as the trainer does, and returns the model as "
            "the trainer wraps it (DDP, FSDP, fully_shard) with this rank's inputs"
        )
    handed_state = ranks.of_rank(request.state, ranks.rank()) if distributed else request.state
    report = SideReport(
        device=str(device), emulated=_emulated(), backing=_backing(device), versions=_versions()
    )
    if request.role == "original":
        if request.realistic:
            _realistic_weights(model)
        # saved after the forward
        handed = {"state_dict": _weights(model, distributed), "inputs": _to(inputs, "cpu")}
    else:
        given = torch.load(handed_state, weights_only=False)
        mapped = map_weights(given["state_dict"], request.weights_map)
        weights, report.fused_weights = fuse_weights(mapped, _weights(model, distributed))
        try:
            missing, unexpected = _load_weights(model, weights, distributed)
        except RuntimeError as exc:  # shapes that do not fit
            raise EntryError(
                f"the migrated model cannot take the original weights: {str(exc).splitlines()[-1].strip()}"
            ) from None
        # missing: the migrated model has them, the original weights do not; unexpected: the reverse
        report.state_mismatch = [f"missing on the migrated side: {k}" for k in unexpected] + [
            f"only on the migrated side: {k}" for k in missing
        ]
        inputs = _tensors_like(inputs, given["inputs"])
    if not distributed:  # a rank's model and inputs stay where its entry put them
        model.to(device)
        inputs = _to(inputs, device)
    model.eval()

    with torch.no_grad():
        call(model, inputs)  # warm-up
        report.forward_ms = _timed(lambda: call(model, inputs))
        modules = ranks.named_modules(model) if distributed else list(model.named_modules())
        recorder = ModuleRecorder(modules)
        with _memory(device) as memory, RandomDraws() as draws, recorder.precision:
            output = call(model, inputs)
        recorder.close()
        if request.role == "original":  # with what each call got and returned, for the replay
            calls = {"call_inputs": _by_key(recorder.inputs), "call_outputs": _by_key(recorder.rows)}
            torch.save({**handed, **calls}, handed_state)
        elif not distributed:  # a module called alone in one rank may wait on a collective forever
            from npu_migrate.verify.replay import replay

            with uncounted():
                named = {name or "(model)": module for name, module in model.named_modules()}
                report.replayed = replay(recorder.calls, given["call_inputs"], given["call_outputs"], named)
    if request.dump:
        from npu_migrate.verify.msprobe_dump import write_dump

        write_dump(Path(request.dump), recorder.calls)
    report.random = sorted(draws.names)
    report.rows = recorder.rows
    report.inputs = recorder.inputs
    report.computed_in, report.computed_within = recorder.computed_in, recorder.computed_within
    report.output = [(path, t.detach().to("cpu", copy=True)) for path, t in flatten(output)]
    if not report.output:
        raise EntryError(f"the model's output holds no tensor (it returned a {type(output).__name__})")
    report.activation_bytes = recorder.activation_bytes
    report.elementwise = [
        name or "(model)"
        for name, module in modules
        if not any(True for _ in module.children())
        and not any(True for _ in module.parameters(recurse=False))
    ]
    report.peak_bytes = memory.peak
    report.parameter_bytes = sum(nbytes(p) for p in model.parameters()) + sum(
        nbytes(b) for b in model.buffers()
    )
    if request.onnx and request.role == "original":
        from npu_migrate.verify.onnx_check import onnx_report

        report.onnx = onnx_report(model, inputs)
    root = Path(request.tree).resolve()
    if request.steps:
        resync = _resync(request) if request.original_steps and not distributed else None
        report.steps = _train(model, inputs, parts, request.steps, report, root, distributed, resync)
    return report


def _weights(model: Any, distributed: bool) -> dict[str, Any]:
    """The model's parameters and buffers by name, on the CPU (a rank's: gathered, unwrapped); a
    module's extra state as it is (Megatron's layers give None)."""
    import torch

    if distributed:
        return ranks.model_state(model)
    return {
        k: v.detach().to("cpu", copy=True) if isinstance(v, torch.Tensor) else v
        for k, v in model.state_dict().items()
    }


def _load_weights(model: Any, weights: dict[str, Any], distributed: bool) -> tuple[list[str], list[str]]:
    """Load weights (whole, by name); the names (missing, unexpected) as load_state_dict says."""
    if distributed:
        return ranks.load_model_state(model, weights)
    result = model.load_state_dict(weights, strict=False)
    return list(result.missing_keys), list(result.unexpected_keys)


def _realistic_weights(model: Any) -> None:
    """Redraw every weight of two or more dimensions with std 1/sqrt(fan_in), the scale at which
    a layer keeps unit-variance inputs at unit variance, as a trained model's activations spread;
    shift one-dimensional parameters (norm weights, biases) by N(0, 0.1). A fresh init (std 0.02)
    keeps activations where approximations agree (GELU's tanh form and erf differ in 0.05% of
    elements there, in 30% at unit variance). Drawn from a fixed seed on the original side, so
    the migrated side loads the same weights."""
    import torch

    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            if not parameter.is_floating_point() or parameter.numel() == 0:
                continue  # nothing to draw (an empty parameter has no fan-in either)
            if parameter.dim() >= 2:
                fan_in = parameter[0].numel()
                drawn = torch.randn(parameter.shape, generator=generator) / fan_in**0.5
            else:
                drawn = parameter.detach().cpu().float() + 0.1 * torch.randn(
                    parameter.shape, generator=generator
                )
            parameter.copy_(drawn.to(parameter.dtype))


def _versions() -> dict[str, str]:
    import torch

    versions = {"python": platform.python_version(), "torch": torch.__version__}
    npu = sys.modules.get("torch_npu")
    if npu is not None:
        versions["torch_npu"] = getattr(npu, "__version__", "?")
    return versions


def _by_key(rows: list[tuple[str, str, Any]]) -> dict[str, Any]:
    return {key: tensor for key, _, tensor in rows}


def _train(
    model: Any,
    inputs: Any,
    parts: dict[str, Any],
    steps: int,
    report: SideReport,
    root: Path,
    distributed: bool,
    resync: tuple[list[Step], Any] | None = None,
) -> list[Step]:
    """`steps` training steps; with `resync` (the original's steps and their Thresholds), the
    noise elements of each step's gradients take the original's values after it
    (training.resync_noise)."""
    import torch

    from npu_migrate.verify.capture import RandomDraws, nbytes

    if parts["loss_fn"] is None:
        raise EntryError("training mode (--steps) needs a loss_fn from the entry")
    optimizer = parts["optimizer"] or torch.optim.SGD(model.parameters(), lr=1e-3)
    report.optimizer = type(optimizer).__name__ + ("" if parts["optimizer"] else " (verify's default)")
    model.train()  # NoDropout turns the dropout modules off, with the functional kinds
    history = []
    report.start = training_state(model, None, distributed)
    off = NoDropout(root)
    for _ in range(steps):
        start = time.perf_counter()
        with off, RandomDraws() as draws:
            loss = parts["loss_fn"](call(model, inputs))
            optimizer.zero_grad()
            loss.backward()
        report.random = sorted(set(report.random) | draws.names)
        grads = {  # after the backward's all-reduce; a rank's gathered, by the unwrapped names
            (ranks.unwrapped(n) if distributed else n): ranks.full(p.grad).detach().to("cpu", copy=True)
            for n, p in model.named_parameters()
            if p.grad is not None
        }
        norm = (
            torch.linalg.vector_norm(torch.stack([g.float().norm() for g in grads.values()])).item()
            if grads
            else 0.0
        )
        optimizer.step()
        history.append(
            Step(
                loss=loss.item(),
                grad_norm=norm,
                grads=grads,
                state=training_state(model, optimizer, distributed),
                ms=(time.perf_counter() - start) * 1000,
            )
        )
        if resync is not None and len(history) <= len(resync[0]):
            from npu_migrate.verify.training import resync_noise

            original = resync[0][len(history) - 1]
            report.resynced.append(resync_noise(model, optimizer, original, grads, resync[1]))
    report.dropout = {site: sorted(asked) for site, asked in sorted(off.requested.items())}
    report.optimizer_bytes = sum(
        nbytes(v) for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)
    )
    return history


def _resync(request: SideRequest) -> tuple[list[Step], Any]:
    """The original's steps and the steps' Thresholds, handed for training.resync_noise."""
    import torch

    from npu_migrate.verify.tensors import Thresholds

    steps = torch.load(request.original_steps, weights_only=False)
    return steps, Thresholds(**request.step_limits)


def training_state(model: Any, optimizer: Any | None, distributed: bool = False) -> dict[str, Any]:
    """What a step leaves behind, by name: parameters, buffers (BatchNorm's running statistics)
    and the optimizer's state per parameter (Adam's moments, momentum buffers); without an
    optimizer, what the first step starts from. A rank's is gathered where sharded."""
    import torch

    if distributed:
        return ranks.training_state(model, optimizer)

    def cpu(tensor: Any) -> Any:
        return tensor.detach().to("cpu", copy=True)

    state = {f"parameter {n}": cpu(p) for n, p in model.named_parameters()}
    state.update({f"buffer {n}": cpu(b) for n, b in model.named_buffers()})
    if optimizer is None:
        return state
    names = {id(p): n for n, p in model.named_parameters()}
    for parameter, entries in optimizer.state.items():
        name = names.get(id(parameter))
        if name is None or not isinstance(entries, dict):
            continue
        for key, value in entries.items():
            if isinstance(value, torch.Tensor):
                state[f"optimizer {name}.{key}"] = cpu(value)
    return state


def _argument_of(
    args: tuple[Any, ...], kwargs: dict[str, Any], position: int, name: str, default: Any
) -> Any:
    """The value the call passed for one parameter, wherever the caller passed it."""
    return args[position] if len(args) > position else kwargs.get(name, default)


def _argument_set(
    args: tuple[Any, ...], kwargs: dict[str, Any], position: int, name: str, value: Any
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's arguments with one parameter set, wherever the caller passed it."""
    if len(args) > position:
        return (*args[:position], value, *args[position + 1 :]), kwargs
    return args, {**kwargs, name: value}


class NoDropout:
    """Dropout off for the comparison of training steps: dropout modules and functional dropout
    (both reach F.dropout and its kin), SDPA's dropout_p and npu_fusion_attention's keep_prob
    draw random masks that differ between the sides. What each call asked for is kept first, by
    the caller in the tree (`requested`): p, and 1 - keep_prob, so a probability ported without
    its complement (`keep_prob=p`) is seen although no mask is drawn."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.requested: dict[str, set[float]] = {}

    def _asked(self, p: Any, training: Any = True) -> None:
        from npu_migrate.verify.capture import caller_in

        if training and float(p) > 0:
            site = caller_in(self.root, sys._getframe(1), past_torch=True) or "(outside the tree)"
            self.requested.setdefault(site, set()).add(round(float(p), 6))

    def __enter__(self) -> NoDropout:
        import torch
        from torch.overrides import TorchFunctionMode

        functional = torch.nn.functional
        dropouts = {
            functional.dropout, functional.dropout1d, functional.dropout2d, functional.dropout3d,
            functional.alpha_dropout, functional.feature_alpha_dropout, torch.dropout,
        }  # fmt: skip
        attention = functional.scaled_dot_product_attention
        asked = self._asked

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = dict(kwargs or {})
                if func in dropouts:  # (input, p, training, ...); torch.dropout's is `train`
                    training = _argument_of(args, kwargs, 2, "training", kwargs.get("train", True))
                    asked(_argument_of(args, kwargs, 1, "p", 0.5), training)
                    return _argument_of(args, kwargs, 0, "input", None)
                if func is attention:  # (query, key, value, attn_mask, dropout_p, ...)
                    asked(_argument_of(args, kwargs, 4, "dropout_p", 0.0))
                    args, kwargs = _argument_set(args, kwargs, 4, "dropout_p", 0.0)
                return func(*args, **kwargs)

        self._mode = Mode()
        self._mode.__enter__()
        self._fusion: tuple[Any, Any] | None = None
        torch_npu: Any = sys.modules.get("torch_npu")
        if torch_npu is not None and hasattr(torch_npu, "npu_fusion_attention"):
            fused = torch_npu.npu_fusion_attention
            self._fusion = (torch_npu, fused)

            def without_dropout(*args: Any, **kwargs: Any) -> Any:  # keep_prob is its 10th parameter
                asked(1.0 - _argument_of(args, kwargs, 9, "keep_prob", 1.0))
                args, kwargs = _argument_set(args, kwargs, 9, "keep_prob", 1.0)
                return fused(*args, **kwargs)

            torch_npu.npu_fusion_attention = without_dropout
        return self

    def __exit__(self, *exc: object) -> None:
        self._mode.__exit__(*exc)
        if self._fusion is not None:
            module, fused = self._fusion
            module.npu_fusion_attention = fused


def main() -> int:
    data = json.loads(Path(sys.argv[1]).read_text())
    sources = {name: WeightSource(**source) for name, source in data.pop("weights_map").items()}
    request = SideRequest(**data, weights_map=sources)
    tree = Path(request.tree)
    if request.timeout:  # just before the parent stops this side: where it was, on stderr
        faulthandler.dump_traceback_later(max(1.0, request.timeout - 2), exit=False)
    out = Path(ranks.of_rank(request.out, ranks.rank()) if request.nproc else request.out)
    if request.nproc:  # the original's gloo as the emulation's: its workers done before finalising
        settle.at_exit()
    try:
        report = run(request)
    except EntryError as exc:
        return _failed(EXIT_USER_ERROR, str(exc), out)
    except Exception as exc:  # whose code failed decides what the user is shown
        return _failed(*failure(exc, tree), out)
    import torch

    torch.save(report, out)
    return 0


def _failed(code: int, message: str, out: Path) -> int:
    """Say why this side failed, on stderr and beside its report (OUT.err: the parent reads a
    rank's own words there, apart from the other ranks' and torchrun's)."""
    print(message, file=sys.stderr)
    out.with_suffix(".err").write_text(json.dumps({"code": code, "message": message}))
    return code


if __name__ == "__main__":
    sys.exit(main())
