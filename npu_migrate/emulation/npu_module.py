"""The `torch.npu` module of the emulation: the device API migrated code calls, answered by the
backing device (the CPU, or CUDA where present). Registered as `torch.npu` by `device.install`."""

from __future__ import annotations

import contextlib
import functools
import os
import time
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from npu_migrate.emulation import amp, host_npus, philox, state, tensors  # noqa: F401 - torch.npu.amp


class _TensorType(type):
    """torch_npu's legacy tensor types (`torch.npu.BoolTensor`), as torch's `torch.cuda.*Tensor`
    are: calling one makes a tensor of its dtype on the NPU, and only such a tensor is an
    instance (mmengine's `Union[torch.BoolTensor, torch.npu.BoolTensor].__args__` needs the two
    apart)."""

    dtype: torch.dtype

    def __instancecheck__(cls, value: Any) -> bool:
        return (
            isinstance(value, torch.Tensor) and value.dtype == cls.dtype and tensors.index(value) is not None
        )

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return getattr(torch, cls.__name__)(*args, **kwargs).npu()


def _tensor_type(name: str, dtype: torch.dtype) -> type:
    return _TensorType(name, (), {"dtype": dtype, "__module__": "torch.npu"})


FloatTensor = _tensor_type("FloatTensor", torch.float32)
HalfTensor = _tensor_type("HalfTensor", torch.float16)
BFloat16Tensor = _tensor_type("BFloat16Tensor", torch.bfloat16)
DoubleTensor = _tensor_type("DoubleTensor", torch.float64)
LongTensor = _tensor_type("LongTensor", torch.int64)
IntTensor = _tensor_type("IntTensor", torch.int32)
BoolTensor = _tensor_type("BoolTensor", torch.bool)
ByteTensor = _tensor_type("ByteTensor", torch.uint8)
CharTensor = _tensor_type("CharTensor", torch.int8)
ShortTensor = _tensor_type("ShortTensor", torch.int16)
# Storage type names kept for code that still spells them (`torch.npu.FloatStorage`).
FloatStorage = torch.FloatStorage
HalfStorage = torch.HalfStorage
BFloat16Storage = torch.BFloat16Storage
LongStorage = torch.LongStorage
IntStorage = torch.IntStorage
ShortStorage = torch.ShortStorage
CharStorage = torch.CharStorage
ByteStorage = torch.ByteStorage
BoolStorage = torch.BoolStorage


def _cuda() -> bool:
    return state.backing().type == "cuda"


# ---------------------------------------------------------------- devices


def is_available() -> bool:
    """True, as the runtime answers torch_npu by default; with PYTORCH_HAL_BASED_NPU_CHECK=1
    torch_npu asks its `device_count`, which ASCEND_RT_VISIBLE_DEVICES="" brings to 0."""
    if os.getenv("PYTORCH_HAL_BASED_NPU_CHECK") == "1":
        return device_count() > 0
    return True


def is_initialized() -> bool:
    return True


def init() -> None:
    """Nothing to initialise: the backing device is ready."""


def _lazy_init() -> None:
    """torch_npu's private twin of `torch.cuda._lazy_init` (npu/__init__.py): the device is
    initialised already here."""


def _lazy_call(callback: Any) -> None:
    """torch_npu's twin of `torch.cuda._lazy_call`: run now where the device is initialised (as
    here always), else when it is. Megatron's RNG tracker sets states through it."""
    callback()


def _visible(raw: int) -> int:
    """How many of `raw` devices ASCEND_RT_VISIBLE_DEVICES leaves, read as torch_npu's
    `_parse_visible_devices` and `_device_count_ascend_hal` read it: unset, all; empty, none (the
    idiom `= ""` that hides every device); else the leading run of digits and commas, ascending
    IDs only, cut at the first ID past the devices there are."""
    var = os.getenv("ASCEND_RT_VISIBLE_DEVICES")
    if var is None:
        return raw
    end = next((i for i, c in enumerate(var) if not (c.isdigit() or c == ",")), len(var))
    ids: list[int] = []
    for elem in var[:end].split(","):
        if not elem:
            break
        ids.append(int(elem))
    for idx, val in enumerate(ids):
        if idx > 0 and val <= ids[idx - 1]:
            return 0
        if val >= raw:
            return idx
    return len(ids)


def device_count() -> int:
    """The backing's CUDA devices; on the CPU, the emulated host's NPUs: as many as
    `run --emulate --npus N` says, else one per local rank the launcher started (torchrun's
    LOCAL_WORLD_SIZE: a host has at least as many devices as the ranks it runs), else one."""
    return _visible(torch.cuda.device_count() if _cuda() else host_npus())


def set_device(device: int | str | torch.device) -> None:
    state.current = state.index_of(device)
    if _cuda():
        torch.cuda.set_device(state.current)


def current_device() -> int:
    return state.current


def get_device_name(device: Any = None) -> str:
    return f"Ascend NPU (emulated on {state.backing()})"


def get_device_capability(device: Any = None) -> None:
    """None, as on a real NPU: code that branches on a CUDA compute capability must not."""
    return None


def get_device_properties(device: Any = None) -> Any:
    if _cuda():
        return torch.cuda.get_device_properties(device)
    return _Properties(get_device_name(), total_memory=0, multi_processor_count=1)


class _Properties:
    def __init__(self, name: str, total_memory: int, multi_processor_count: int) -> None:
        self.name = name
        self.total_memory = total_memory
        self.multi_processor_count = multi_processor_count

    def __repr__(self) -> str:
        return f"_NPUDeviceProperties(name='{self.name}', total_memory={self.total_memory})"


# The SoC the emulation stands in for, as torch_npu's get_soc_version() numbers them: Ascend910B1
# (220, torch_npu/_inductor/dvm), an Atlas A2 training part with bf16 and full-precision
# training (mmengine's is_npu_support_full_precision asks `get_soc_version() >= 220`).
_SOC_VERSION = 220


def get_soc_version() -> int:
    return _SOC_VERSION


def set_compile_mode(jit_compile: bool = False) -> None:
    """torch_npu's choice between compiling operators at run time and its prebuilt binaries
    (npu_config.set_compile_mode); the backing device has no such choice."""


def is_bf16_supported(including_emulation: bool = False) -> bool:
    return True


def synchronize(device: Any = None) -> None:
    if _cuda():
        torch.cuda.synchronize()


def utilization(device: Any = None) -> int:
    return 0


@contextlib.contextmanager
def device(device: Any) -> Iterator[None]:
    previous = current_device()
    set_device(device)
    try:
        yield
    finally:
        set_device(previous)


class device_of:
    """Selects the device of a tensor on the NPU; a no-op for one elsewhere (as torch_npu's)."""

    def __init__(self, obj: Any) -> None:
        self._index = obj.get_device() if getattr(obj, "is_npu", False) else -1
        self._previous = -1

    def __enter__(self) -> None:
        if self._index >= 0:
            self._previous = current_device()
            set_device(self._index)

    def __exit__(self, *exc: object) -> None:
        if self._index >= 0:
            set_device(self._previous)


def can_device_access_peer(device_id: Any, peer_device_id: Any) -> bool:
    device_id, peer_device_id = state.index_of(device_id), state.index_of(peer_device_id)
    if device_id < 0 or device_id >= device_count():
        raise AssertionError("Invalid device id")
    if peer_device_id < 0 or peer_device_id >= device_count():
        raise AssertionError("Invalid peer device id")
    return _cuda() and torch.cuda.can_device_access_peer(device_id, peer_device_id)


_sync_debug_mode = 0


def set_sync_debug_mode(debug_mode: int | str) -> None:
    global _sync_debug_mode
    if isinstance(debug_mode, str):
        modes = {"default": 0, "warn": 1, "error": 2}
        if debug_mode not in modes:
            raise RuntimeError("invalid value of debug_mode, expected one of `default`, `warn`, `error`")
        debug_mode = modes[debug_mode]
    _sync_debug_mode = debug_mode


def get_sync_debug_mode() -> int:
    return _sync_debug_mode


def current_blas_handle() -> None:
    """None, with torch_npu's warning: the NPU has no BLAS handle."""
    warnings.warn("NPU does not use blas handle.", stacklevel=2)
    return None


# ---------------------------------------------------------------- random numbers


def manual_seed(seed: int) -> None:
    """Seeds the generator the NPU draws from (on the CPU backing, the CPU's: the NPU's numbers are
    the CPU original's, so seeding one seeds both)."""
    if _cuda():
        torch.cuda.manual_seed(seed)
    else:
        torch.default_generator.manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    if _cuda():
        torch.cuda.manual_seed_all(seed)
    else:
        torch.default_generator.manual_seed(seed)


def seed() -> None:
    torch.seed()


def seed_all() -> None:
    torch.seed()


def initial_seed() -> int:
    return torch.initial_seed()


# On the CPU the NPU draws from the backing's generator, and hands out its state as the NPU's
# 16 Philox bytes (emulation.philox); a CUDA backing's state has that form already.
_states = philox.PhiloxStates(torch.default_generator)


def get_rng_state(device: Any = None) -> torch.Tensor:
    return torch.cuda.get_rng_state() if _cuda() else _states.get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = None) -> None:
    if _cuda():
        torch.cuda.set_rng_state(new_state)
    else:
        _states.set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    """As torch_npu's (npu/random.py): one state per device."""
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: Any) -> None:
    for i, new_state in enumerate(new_states):
        set_rng_state(new_state, i)


class _DefaultGenerator:
    """`torch.npu.default_generators[i]`: the NPU's generator, whose state is the NPU's 16 Philox
    bytes as `get_rng_state` hands it out (Megatron's RNG tracker sets states through it). Not a
    `torch.Generator`: torch refuses it as a `generator=` argument (the NPU draws from the
    backing's default generator; a generator object of its own would draw other numbers)."""

    def __init__(self, index: int) -> None:
        self.index = index

    @property
    def device(self) -> torch.device:
        return state.Device("npu", self.index)

    def get_state(self) -> torch.Tensor:
        return get_rng_state(self.index)

    def set_state(self, new_state: torch.Tensor) -> None:
        set_rng_state(new_state, self.index)

    def manual_seed(self, seed: int) -> _DefaultGenerator:
        manual_seed(seed)
        return self

    def seed(self) -> int:
        seed()
        return initial_seed()

    def initial_seed(self) -> int:
        return initial_seed()


@functools.cache
def _default_generators(count: int) -> tuple[_DefaultGenerator, ...]:
    return tuple(_DefaultGenerator(i) for i in range(count))


def __getattr__(name: str) -> Any:
    """`default_generators`: one per device, as torch_npu fills it once the device initialises
    (the device count is known once the backing is chosen)."""
    if name == "default_generators":
        return _default_generators(device_count())
    raise AttributeError(f"module 'torch.npu' has no attribute '{name}'")


def _is_in_bad_fork() -> bool:
    """torch.manual_seed asks every registered device module this."""
    return False


# ---------------------------------------------------------------- memory


# On the CPU backing, allocated memory is what the tensors on the NPU hold (emulation.tensors);
# its peak is the largest figure any of these calls has seen since the last reset.
_peak = 0


def memory_allocated(device: Any = None) -> int:
    global _peak
    if _cuda():
        return torch.cuda.memory_allocated()
    allocated = tensors.live_bytes()
    _peak = max(_peak, allocated)
    return allocated


def max_memory_allocated(device: Any = None) -> int:
    return torch.cuda.max_memory_allocated() if _cuda() else max(_peak, memory_allocated())


def memory_reserved(device: Any = None) -> int:
    return torch.cuda.memory_reserved() if _cuda() else memory_allocated()


def max_memory_reserved(device: Any = None) -> int:
    return torch.cuda.max_memory_reserved() if _cuda() else max_memory_allocated()


def memory_stats(device: Any = None) -> dict[str, int]:
    return torch.cuda.memory_stats() if _cuda() else {}


def reset_peak_memory_stats(device: Any = None) -> None:
    global _peak
    if _cuda():
        torch.cuda.reset_peak_memory_stats()
    else:
        _peak = 0


def empty_cache() -> None:
    if _cuda():
        torch.cuda.empty_cache()


def mem_get_info(device: Any = None) -> tuple[int, int]:
    return torch.cuda.mem_get_info() if _cuda() else (0, 0)


# torch_npu.npu.memory's deprecated names warn and answer as the names they became (as torch.cuda's).


def _deprecated(message: str) -> None:
    warnings.warn(message, DeprecationWarning, stacklevel=3)  # at the caller of the deprecated name


def reset_max_memory_allocated(device: Any = None) -> None:
    _deprecated(
        "torch_npu.npu.reset_max_memory_allocated now calls torch_npu.npu.reset_peak_memory_stats, "
        "which resets /all/ peak memory stats."
    )
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device: Any = None) -> None:
    _deprecated(
        "torch_npu.npu.reset_max_memory_cached now calls torch_npu.npu.reset_peak_memory_stats, "
        "which resets /all/ peak memory stats."
    )
    reset_peak_memory_stats(device)


def memory_cached(device: Any = None) -> int:
    _deprecated("torch_npu.npu.memory_cached has been renamed to torch_npu.npu.memory_reserved")
    return memory_reserved(device)


def max_memory_cached(device: Any = None) -> int:
    _deprecated("torch_npu.npu.max_memory_cached has been renamed to torch_npu.npu.max_memory_reserved")
    return max_memory_reserved(device)


def reset_accumulated_memory_stats(device: Any = None) -> None:
    if _cuda():
        torch.cuda.reset_accumulated_memory_stats()


def memory_stats_as_nested_dict(device: Any = None) -> dict[str, Any]:
    return torch.cuda.memory_stats_as_nested_dict() if _cuda() else {}


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    if _cuda():
        return torch.cuda.memory_summary(abbreviated=abbreviated)
    allocated, peak = memory_allocated(), max_memory_allocated()
    return f"NPU memory summary (emulated): {allocated} bytes allocated, peak {peak}"


def memory_snapshot(mempool_id: Any = None) -> list[Any]:
    return torch.cuda.memory_snapshot() if _cuda() else []


_fraction = 1.0


def get_per_process_memory_fraction(device: Any = None) -> float:
    return _fraction


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    global _fraction
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if fraction < 0 or fraction > 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _fraction = fraction
    if _cuda():
        torch.cuda.set_per_process_memory_fraction(fraction)


def ipc_collect() -> None:
    if _cuda():
        torch.cuda.ipc_collect()


def get_allocator_backend() -> str:
    return "native"


def host_memory_stats() -> dict[str, Any]:
    return {}


def host_memory_stats_as_nested_dict() -> dict[str, Any]:
    return {}


def reset_accumulated_host_memory_stats() -> None:
    """Pinned host memory is not tracked by the emulation."""


def reset_peak_host_memory_stats() -> None:
    """Pinned host memory is not tracked by the emulation."""


# ---------------------------------------------------------------- streams and events


class Stream:
    """Work runs in order on the backing device; a stream only has to exist and synchronise."""

    def __init__(self, device: Any = None, priority: int = 0) -> None:
        self.device = state.backing()

    def synchronize(self) -> None:
        synchronize()

    def wait_stream(self, stream: Stream) -> None:
        synchronize()

    def wait_event(self, event: Event) -> None:
        synchronize()

    def query(self) -> bool:
        return True

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event


_default_stream = Stream()


class StreamContext:
    """Selects a stream; streams are not emulated, so entering it changes nothing."""

    def __init__(self, stream: Stream | None) -> None:
        self.stream = stream

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def is_current_stream_capturing() -> bool:
    """False: graph capture is not emulated."""
    return False


def current_stream(device: Any = None) -> Stream:
    return _default_stream


def default_stream(device: Any = None) -> Stream:
    return _default_stream


@contextlib.contextmanager
def stream(stream: Stream | None) -> Iterator[None]:
    yield


def set_stream(stream: Stream) -> None:
    """Streams are not emulated: everything runs on one queue."""


class Event:
    """Host-clock timing: elapsed_time is in milliseconds, as on the device."""

    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> None:
        self._time: float | None = None

    def record(self, stream: Stream | None = None) -> None:
        synchronize()
        self._time = time.perf_counter()

    def synchronize(self) -> None:
        synchronize()

    def wait(self, stream: Stream | None = None) -> None:
        synchronize()

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: Event) -> float:
        if self._time is None or end._time is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end._time - self._time) * 1000.0


# ---------------------------------------------------------------- precision switches


class _AllowHF32:
    """`torch.npu.matmul.allow_hf32` and `torch.npu.conv.allow_hf32`: HF32 has no CPU
    counterpart, so the switch is remembered (and mirrored to TF32 on a CUDA backing)."""

    def __init__(self, default: bool, mirror: str) -> None:
        self._allow = default
        self._mirror = mirror

    @property
    def allow_hf32(self) -> bool:
        return self._allow

    @allow_hf32.setter
    def allow_hf32(self, value: bool) -> None:
        self._allow = bool(value)
        if _cuda():
            if self._mirror == "matmul":
                torch.backends.cuda.matmul.allow_tf32 = bool(value)
            else:
                torch.backends.cudnn.allow_tf32 = bool(value)


matmul = _AllowHF32(default=False, mirror="matmul")
conv = _AllowHF32(default=True, mirror="conv")


# ---------------------------------------------------------------- markers (mstx)


class mstx:
    """Markers and ranges for the Ascend profiler: accepted and ignored."""

    _next = 0

    @staticmethod
    def mark(message: str, stream: Any = None, domain: str = "default") -> None:
        return None

    @staticmethod
    def range_push(message: str, stream: Any = None, domain: str = "default") -> int:
        return 0

    @staticmethod
    def range_pop(domain: str = "default") -> int:
        return 0

    @staticmethod
    def range_start(message: str, stream: Any = None, domain: str = "default") -> int:
        mstx._next += 1
        return mstx._next

    @staticmethod
    def range_end(range_id: int, domain: str = "default") -> None:
        return None


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float16, torch.bfloat16]


def is_autocast_enabled() -> bool:
    return torch.is_autocast_enabled(state.backing().type)


def get_autocast_dtype() -> torch.dtype:
    return torch.get_autocast_dtype(state.backing().type)
