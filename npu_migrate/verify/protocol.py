"""What the parent and a side process of `verify` hand each other: the request (JSON, written by
the parent) and the side's report (pickled with torch.save, tensors on the CPU)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Tensor = Any  # a torch.Tensor: this module is imported where torch may not be


@dataclass(frozen=True)
class SideRequest:
    role: str  # "original" or "migrated"
    tree: str  # the project the side imports its entry from
    entry: str  # FILE:FUNC
    device: str
    steps: int  # training steps to run (0: forward only)
    onnx: bool  # also export the original to ONNX and run it
    state: str  # where the original side saves its weights and inputs, and the migrated reads them
    out: str  # where the side writes its SideReport
    timeout: float  # seconds the parent waits before it stops the side
    weights_map: dict[str, WeightSource] = field(default_factory=dict)  # migrated name -> original
    dump: str = ""  # where to write the forward pass as an msprobe dump ("": nowhere)
    realistic: bool = False  # the original side redraws its weights at unit-variance scale first
    nproc: int = 0  # ranks under torchrun (0: one plain process); state and out are then per rank
    stand_ins: dict[str, str] = field(default_factory=dict)  # original side: CUDA library -> release
    # migrated side, training on the original's backing: the original's steps (torch.save'd) and
    # the steps' Thresholds (as a dict), by which its noise elements are given the original's
    # values after each step (training.resync_noise); "" and {}: not done
    original_steps: str = ""
    step_limits: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WeightSource:
    """Where a migrated model's tensor comes from in the original's weights (--weights-map): one
    tensor, or several concatenated along `dim`; transposed after, if asked."""

    names: list[str]
    dim: int = 0
    transpose: bool = False


@dataclass
class Step:
    """One training step as a side ran it."""

    loss: float
    grad_norm: float
    grads: dict[str, Tensor]  # by parameter name
    state: dict[str, Tensor]  # parameters, buffers and optimizer state after the step, by name
    ms: float


@dataclass
class SideReport:
    """What one side saw."""

    device: str
    emulated: bool  # the migrated side ran on the NPU emulation
    backing: str  # the hardware that computed (the emulation's backing device)
    rows: list[tuple[str, str, Tensor]] = field(default_factory=list)  # (key, module, output)
    inputs: list[tuple[str, str, Tensor]] = field(default_factory=list)  # (key, module, input)
    # (module, handed, key, tensor): the migrated modules' own code on the original's inputs (replay.py)
    replayed: list[tuple[str, bool, str, Tensor]] = field(default_factory=list)
    output: list[tuple[str, Tensor]] = field(default_factory=list)  # (path, tensor) of the model's output
    activation_bytes: dict[str, int] = field(default_factory=dict)  # by module
    peak_bytes: int = 0
    parameter_bytes: int = 0
    forward_ms: float = 0.0  # median of warmed-up runs
    random: list[str] = field(default_factory=list)  # random operators the run called
    state_mismatch: list[str] = field(default_factory=list)  # weights one side has and the other not
    fused_weights: list[str] = field(default_factory=list)  # weights paired by shape, in words
    onnx: dict[str, Any] | None = None  # the ONNX check (original side, --onnx)
    steps: list[Step] = field(default_factory=list)
    start: dict[str, Tensor] = field(default_factory=dict)  # parameters and buffers before the first step
    optimizer: str | None = None  # the optimizer's class name (training)
    optimizer_bytes: int | None = None
    fused_calls: dict[str, int] = field(default_factory=dict)  # torch_npu fused operator: calls (migrated)
    fused_sites: dict[str, int] = field(default_factory=dict)  # `file:qualname` in the tree: fused calls
    guarded: dict[str, dict[str, int]] = field(default_factory=dict)  # `file:line`: "fused" or why not: runs
    dropout: dict[str, list[float]] = field(default_factory=dict)  # `file:qualname`: p asked for in steps
    versions: dict[str, str] = field(default_factory=dict)  # python, torch, torch_npu: what the side ran
    elementwise: list[str] = field(default_factory=list)  # leaf modules without parameters (GELU, SiLU)
    # rows whose computation ran in a coarser dtype than their own (capture.ComputedIn): the dtype,
    # end to end (by row key) and inside the module's own call (by own-code row key)
    computed_in: dict[str, str] = field(default_factory=dict)
    computed_within: dict[str, str] = field(default_factory=dict)
    stand_ins: list[str] = field(default_factory=list)  # original: CUDA libraries it ran on stand-ins
    answered: list[str] = field(default_factory=list)  # original: its CUDA asserts and devices answered
    resynced: list[int] = field(default_factory=list)  # migrated: noise elements resynced, by step

    @property
    def where(self) -> str:
        """Where the side ran, in words: `on cpu`, `on npu (NPU emulation)`."""
        return f"on {self.device}" + (" (NPU emulation)" if self.emulated else "")
