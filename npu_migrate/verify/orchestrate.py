"""The parent of `verify`: run the original side, hand its weights and inputs to the migrated
side, run that (on a real NPU, else on the emulation), and compare what both recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from npu_migrate.verify.compare import Comparison, Thresholds, compare_runs


class SideFailed(Exception):
    """One side could not run; the message is what the user needs (their frames only)."""

    def __init__(self, side: str, message: str) -> None:
        super().__init__(f"the {side} side failed:\n{message}")
        self.side = side


@dataclass(frozen=True)
class Options:
    original: Path
    migrated: Path
    entry: str
    steps: int = 0
    device_original: str | None = None
    device_migrated: str = "npu"
    emulate: bool | None = None  # None: emulate when no real torch_npu imports
    onnx: bool = False
    limits: Thresholds = field(default_factory=Thresholds)


@dataclass
class Result:
    comparison: Comparison
    original: dict[str, Any]
    migrated: dict[str, Any]


def _side(role: str, tree: Path, options: Options, device: str, work: Path, emulate: bool) -> dict[str, Any]:
    import torch

    out = work / f"{role}.pt"
    request = {
        "role": role,
        "tree": str(tree.resolve()),
        "entry": options.entry,
        "device": device,
        "steps": options.steps,
        "onnx": options.onnx,
        "state": str(work / "original-state.pt"),
        "out": str(out),
    }
    path = work / f"{role}.json"
    path.write_text(json.dumps(request))
    env = dict(os.environ)
    if role == "migrated" and emulate:
        from npu_migrate.emulation import site_pythonpath

        env["PYTHONPATH"] = site_pythonpath(env)
    done = subprocess.run(
        [sys.executable, "-m", "npu_migrate.verify.side", str(path)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        message = "\n".join(line for line in done.stderr.splitlines() if "torch_npu is emulated" not in line)
        raise SideFailed(role, message.rstrip() or f"exit code {done.returncode}")
    return torch.load(out, weights_only=False)


def run(options: Options, phase: Callable[[str], None] = lambda _: None) -> Result:
    import torch

    from npu_migrate.emulation.runner import real_torch_npu_imports

    for tree in (options.original, options.migrated):
        if not tree.is_dir():
            raise SideFailed(
                "original" if tree == options.original else "migrated", f"no such folder: {tree}"
            )
    emulate = options.emulate if options.emulate is not None else not real_torch_npu_imports()
    device = options.device_original or ("cuda" if torch.cuda.is_available() else "cpu")
    with tempfile.TemporaryDirectory(prefix="npu-migrate-verify-") as folder:
        work = Path(folder)
        phase(f"running the original on {device}")
        original = _side("original", options.original, options, device, work, emulate=False)
        phase("running the migrated copy" + (" on the NPU emulation" if emulate else " on the NPU"))
        migrated = _side("migrated", options.migrated, options, options.device_migrated, work, emulate)
    phase("comparing")
    return Result(compare_runs(original, migrated, options.limits), original, migrated)
