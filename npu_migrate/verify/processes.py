"""The side processes verify starts run in process groups of their own, so that stopping one
stops everything it started (a DataLoader's workers, torchrun's ranks, pytest's subprocesses)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


def stop(process: subprocess.Popen[str]) -> None:
    """Kill the process and every process it started, if still running."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
