"""Signals that stop a run: SIGTERM (from `timeout` or a CI runner) and SIGINT (Ctrl-C) stop
the parent and every worker, leave each file untouched or completely rewritten, and end with
128 + the signal; a second signal while that is under way ends everything at once; a parent
killed outright takes its workers with it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from .test_cli import project as tree

FUNCTIONS = "".join(f"def f{j}(a):\n    return a.cuda() + {j}\n" for j in range(300))
SOURCE = "import torch\n" + FUNCTIONS  # about a quarter of a second of work per file


def start(root: Path, tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], psutil.Process]:
    """The run, once its workers are at work (so that a signal lands mid-run)."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / ".cache")}
    command = [sys.executable, "-m", "npu_migrate", *args, str(root), "--no-cache", "-j2"]
    run = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    parent = psutil.Process(run.pid)
    deadline = time.monotonic() + 60
    while len(parent.children()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)
    return run, parent


def gone(processes: list[psutil.Process]) -> bool:
    _, alive = psutil.wait_procs(processes, timeout=120)
    return not alive


@pytest.fixture
def many(tmp_path: Path) -> Path:
    return tree(tmp_path, {f"m{i}.py": SOURCE for i in range(40)})


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_the_run_and_its_workers(tmp_path: Path, many: Path, signum: int, code: int) -> None:
    run, parent = start(many, tmp_path, "apply")
    workers = parent.children()
    os.kill(run.pid, signum)
    _, stderr = run.communicate(timeout=300)
    assert run.returncode == code, stderr
    assert "Traceback" not in stderr
    assert (
        stderr.strip().splitlines()[-1]
        == f"interrupted by {signal.Signals(signum).name}; no file was written"
    )
    assert gone(workers)
    assert all((many / f"m{i}.py").read_text() == SOURCE for i in range(40))


@pytest.mark.parametrize("gap", [0.0, 0.01, 0.03, 0.06])
def test_two_signals_close_together_end_the_run_at_once(tmp_path: Path, many: Path, gap: float) -> None:
    """The second signal lands while the first unwinds, or while the interpreter shuts down
    (about 10 to 80 ms after it, where it once killed the process by the signal: exit -2)."""
    for _ in range(2):
        run, parent = start(many, tmp_path, "scan")
        workers = parent.children()
        os.kill(run.pid, signal.SIGINT)
        time.sleep(gap)
        with contextlib.suppress(ProcessLookupError):
            os.kill(run.pid, signal.SIGINT)
        _, stderr = run.communicate(timeout=300)  # never a hang
        assert run.returncode == 130 and "Traceback" not in stderr, stderr
        assert gone(workers)


def test_workers_die_with_a_parent_killed_outright(tmp_path: Path, many: Path) -> None:
    run, parent = start(many, tmp_path, "scan")
    workers = parent.children()
    run.kill()
    run.communicate(timeout=300)
    assert gone(workers)
