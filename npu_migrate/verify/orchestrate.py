"""The parent of `verify`: run the original side, hand its weights and inputs to the migrated
side, run that (on a real NPU, else on the emulation), and compare what both recorded."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from npu_migrate.processes import stop
from npu_migrate.verify import ranks, stand_ins
from npu_migrate.verify.compare import Comparison, compare_runs, same_hardware, step_limits
from npu_migrate.verify.protocol import SideReport, SideRequest, WeightSource
from npu_migrate.verify.side import EXIT_TOOL_ERROR
from npu_migrate.verify.tensors import Thresholds


class SideFailed(Exception):
    """One side could not run; the message is what the user needs (their frames only)."""

    def __init__(self, side: str, message: str, tool: bool = False) -> None:
        header = f"npu-migrate failed on the {side} side" if tool else f"the {side} side failed"
        super().__init__(f"{header}:\n{message}")
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
    realistic: bool = False  # the original's weights redrawn at unit-variance scale (side._realistic_weights)
    limits: Thresholds = field(default_factory=Thresholds)
    timeout: float = 600.0  # seconds a side may run
    memory: int | None = None  # bytes of data a side may allocate (None: no cap)
    weights_map: dict[str, WeightSource] = field(default_factory=dict)  # migrated name -> original
    dump: Path | None = None  # msprobe dumps of each side's forward, in dump/original and dump/migrated
    nproc: int = 0  # each side under torchrun with this many ranks (0: one plain process)
    forecast: bool = False  # the emulated migrated side records what it dispatches (npu_migrate.forecast)
    # the CUDA-only libraries the original may import as plain-torch stand-ins, by release
    stand_ins: dict[str, str] = field(default_factory=lambda: stand_ins.choose([]))


@dataclass
class Result:
    comparison: Comparison
    original: SideReport
    migrated: SideReport
    trees: tuple[str, str] = ("", "")  # the original's and the migrated's, as given
    command: str = ""  # the command line that ran verify
    changes: dict[str, int] = field(default_factory=dict)  # verify TREE: its copy's changes, by rule
    # --nproc: the rank shown (the first that diverges, else 0) and every rank's verdict
    rank: int | None = None
    ranks: list[Comparison] = field(default_factory=list)
    forecast: Any = None  # --forecast: what a real NPU will do with the migrated side (forecast.analysis)


def forecast_folder(work: Path) -> Path:
    """Where the migrated side's processes leave their forecast recordings."""
    return work / "forecast"


def _side(
    role: str,
    tree: Path,
    options: Options,
    device: str,
    work: Path,
    emulate: bool,
    resync: tuple[str, dict[str, Any]] = ("", {}),
) -> list[SideReport]:
    """The side's report, one per rank under --nproc."""
    import torch

    out = work / f"{role}.pt"
    request = SideRequest(
        role=role,
        tree=str(tree.resolve()),
        entry=options.entry,
        device=device,
        steps=options.steps,
        onnx=options.onnx,
        realistic=options.realistic,
        state=str(work / "original-state.pt"),
        out=str(out),
        timeout=options.timeout,
        weights_map=options.weights_map,
        dump=str(options.dump / role) if options.dump else "",
        nproc=options.nproc,
        stand_ins=options.stand_ins,
        original_steps=resync[0],
        step_limits=resync[1],
    )
    path = work / f"{role}.json"
    path.write_text(json.dumps(asdict(request)))
    env = dict(os.environ)
    if role == "migrated" and emulate:
        from npu_migrate.emulation import site_pythonpath

        env["PYTHONPATH"] = site_pythonpath(env)
        if options.forecast:
            from npu_migrate.forecast import FOLDER_VARIABLE, ROOT_VARIABLE

            recordings = forecast_folder(work)
            shutil.rmtree(recordings, ignore_errors=True)  # a bisect's earlier copy left its own
            recordings.mkdir()
            env[FOLDER_VARIABLE], env[ROOT_VARIABLE] = str(recordings), str(tree.resolve())
    launcher = (
        ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={options.nproc}"]
        if options.nproc
        else []
    )
    side = subprocess.Popen(
        [sys.executable, *launcher, "-m", "npu_migrate.verify.side", str(path)],
        cwd=tree,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: stopped with everything it started
        preexec_fn=_memory_cap(options.memory),
    )
    try:
        _, stderr = side.communicate(timeout=options.timeout)
    except subprocess.TimeoutExpired:
        stop(side)
        _, stderr = side.communicate()
        where = _user_frames(stderr, tree)
        raise SideFailed(
            role, f"still running after {options.timeout:g} s (--timeout); stopped{where}"
        ) from None
    finally:
        stop(side)
    if side.returncode != 0 and options.nproc:
        raise _rank_failure(role, options, out, stderr)
    if side.returncode != 0:
        message = "\n".join(line for line in stderr.splitlines() if "torch_npu is emulated" not in line)
        if side.returncode < 0 or "MemoryError" in message:
            cap = f" (--max-side-memory {options.memory / 2**30:g} GiB)" if options.memory else ""
            message = message or f"killed by signal {-side.returncode}{cap}"
        raise SideFailed(
            role, message.rstrip() or f"exit code {side.returncode}", tool=side.returncode == EXIT_TOOL_ERROR
        )
    if options.nproc:
        return [torch.load(ranks.of_rank(str(out), r), weights_only=False) for r in range(options.nproc)]
    return [torch.load(out, weights_only=False)]


def _rank_failure(role: str, options: Options, out: Path, stderr: str) -> SideFailed:
    """The first rank's own words where a rank failed (each writes them beside its report),
    else the end of what torchrun printed."""
    for number in range(options.nproc):
        said = Path(ranks.of_rank(str(out), number)).with_suffix(".err")
        if said.is_file():
            failed = json.loads(said.read_text())
            message = f"rank {number} of {options.nproc}: {failed['message']}"
            return SideFailed(role, message, tool=failed["code"] == EXIT_TOOL_ERROR)
    tail = "\n".join(stderr.rstrip().splitlines()[-12:])
    return SideFailed(role, f"torchrun with {options.nproc} ranks failed:\n{tail}")


def _memory_cap(limit: int | None) -> Callable[[], None] | None:
    """Run in the side process before it starts: cap the data it may allocate."""
    if limit is None:
        return None

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))

    return cap


def _user_frames(stderr: str, tree: Path) -> str:
    """Where the side was when it was stopped: its tracebacks' lines in the user's tree."""
    root = str(tree.resolve())
    frames = [line.strip() for line in stderr.splitlines() if root in line and "File" in line]
    return (" in:\n  " + "\n  ".join(frames[-6:])) if frames else ""


def run(options: Options, phase: Callable[[str], None] = lambda _: None) -> Result:
    """The original and the migrated side of `options`, compared."""
    with Runs(options) as runs:
        return runs.against(options.migrated, phase)


class Runs:
    """One verify's side runs: the original once, then each migrated tree against it (verify
    TREE's bisect compares a dozen copies with the same original, which need not run again)."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self._folder = tempfile.TemporaryDirectory(prefix="npu-migrate-verify-")
        self.work = Path(self._folder.name)
        self._originals: list[SideReport] | None = None

    def __enter__(self) -> Runs:
        return self

    def __exit__(self, *exc: object) -> None:
        self._folder.cleanup()

    def against(
        self, migrated: Path, phase: Callable[[str], None] = lambda _: None, dump: bool = True
    ) -> Result:
        """`migrated` run and compared with the original (run first, once); without `dump`, the
        migrated side writes no msprobe dump (a bisect's copies keep the first one's)."""
        import torch

        from npu_migrate.emulation.runner import real_torch_npu_imports

        options = self.options
        for tree in (options.original, migrated):
            if not tree.is_dir():
                raise SideFailed(
                    "original" if tree == options.original else "migrated", f"no such folder: {tree}"
                )
        emulate = options.emulate if options.emulate is not None else not real_torch_npu_imports()
        world = f" in {options.nproc} ranks (torchrun)" if options.nproc else ""
        if self._originals is None:
            device = options.device_original or ("cuda" if torch.cuda.is_available() else "cpu")
            phase(f"running the original on {device}{world}")
            self._originals = _side("original", options.original, options, device, self.work, emulate=False)
        phase("running the migrated copy" + (" on the NPU emulation" if emulate else " on the NPU") + world)
        side_options = options if dump else replace(options, dump=None)
        resync = self._resync(emulate)
        device = options.device_migrated
        migrateds = _side("migrated", migrated, side_options, device, self.work, emulate, resync)
        phase("comparing")
        originals = self._originals
        comparisons = [compare_runs(a, b, options.limits) for a, b in zip(originals, migrateds, strict=True)]
        shown = next((r for r, c in enumerate(comparisons) if not c.passed), 0)
        trees = (str(options.original), str(migrated))
        result = Result(comparisons[shown], originals[shown], migrateds[shown], trees=trees)
        if options.nproc:
            result.rank, result.ranks = shown, comparisons
        return result

    def _resync(self, emulate: bool) -> tuple[str, dict[str, Any]]:
        """What the migrated side needs to give its steps' noise elements the original's values
        (training.resync_noise): where the sides compute on the same hardware (the tight rule),
        one process each, and the original trained."""
        import torch

        options = self.options
        if not self._originals or not self._originals[0].steps or options.nproc:
            return "", {}
        original = self._originals[0]
        backing = ("cuda" if torch.cuda.is_available() else "cpu") if emulate else "npu"  # emulation.state
        if not same_hardware(options.limits.rule, original.backing, backing):
            return "", {}
        path = self.work / "original-steps.pt"
        if not path.exists():
            torch.save(original.steps, path)
        return str(path), asdict(step_limits(options.limits, original))
