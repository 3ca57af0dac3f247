"""Stopping on Ctrl-C, SIGTERM or SIGHUP (the terminal closed): the first signal unwinds the run
(workers stopped, files left either untouched or completely rewritten); a second one, while that
is under way, ends the process and every worker at once. Workers ignore them: only the parent
decides."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

# The signals that stop a run (the terminal's hangup too: left to its default, it would end the
# run at once and leave the ranks it started, in sessions of their own, running)
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(BaseException):
    """A signal that stops the run, raised past typer (which would turn KeyboardInterrupt into a
    silent exit 130) so that the run can say what it left behind; a BaseException, so no
    `except Exception` in the engine mistakes it for a file's error."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.left = ""  # what the command left behind, said after the signal's name


@contextmanager
def leaving(state: str) -> Iterator[None]:
    """What an interruption inside leaves behind, for the last line to say."""
    try:
        yield
    except Interrupted as stop:
        stop.left = state
        raise


def interrupt(signum: int, frame: object) -> None:
    """The first signal: unwind. From now on another one kills at once."""
    for each in STOPPING:
        signal.signal(each, _kill_now)
    raise Interrupted(signum)


def _kill_now(signum: int, frame: object) -> None:
    from npu_migrate.processes import end_descendants  # here: scan and apply start no other process

    stop_workers()
    end_descendants()  # what run and verify started, where the first signal's unwinding has not got to it
    os._exit(128 + signum)


def exit_now(code: int) -> NoReturn:
    """All is said and the exit code chosen: end without the interpreter's shutdown, where a
    signal would kill the process by the signal (CPython puts the default action back for the
    handlers it set) and the process pool's exit hook can race its own closing pipes."""
    for each in STOPPING:
        signal.signal(each, signal.SIG_IGN)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def stop_workers() -> None:
    """Kill this process's worker processes (they ignore the signals that stop a run)."""
    import multiprocessing  # here, as ctypes below: a run that starts no worker needs neither

    for worker in multiprocessing.active_children():
        worker.kill()


def ignore_in_worker() -> None:
    """A worker process: a signal to its process group (Ctrl-C in a terminal) is its parent's;
    and where the parent is killed outright (SIGKILL, out of memory), the worker dies with it
    (Linux's parent-death signal) instead of running on, orphaned."""
    from npu_migrate.processes import prctl

    for each in STOPPING:
        signal.signal(each, signal.SIG_IGN)
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


_PR_SET_PDEATHSIG = 1  # linux/prctl.h
