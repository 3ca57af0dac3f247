"""Letting a distributed program's native threads finish before the interpreter finalises.

Gloo's worker threads drop each finished collective after the caller has seen it complete. The
collective holds its tensors; a tensor whose Python object the program has already let go is
kept alive by torch for as long as its C++ side lives, so the worker's drop takes the GIL to
free that object. Where that happens while the interpreter finalises, Python ends the worker
thread inside a C++ destructor and the process aborts ("terminate called without an active
exception"; gdb: `TensorImpl::decref_pyobject` in `~AsyncWork` on `ProcessGroupGloo::runLoop`,
`take_gil` -> `PyThread_exit_thread`). torch 2.13 does this to CPU programs with gloo too, the
more often the busier the machine. At exit, before finalising, this waits with the GIL free
until no other thread of the process is runnable (read from /proc), so a worker that was only
waiting for the CPU or the GIL finishes first. Needs no torch."""

from __future__ import annotations

import atexit
import threading
import time
from pathlib import Path

_TASKS = Path("/proc/self/task")
_STEP_S = 0.01
_QUIET_STEPS = 2  # checks in a row with no runnable thread
_LIMIT_S = 2.0  # a thread that stays runnable (a busy loop of the program's own) is not waited for
_FALLBACK_S = 0.2  # where /proc cannot tell: the pause that covered an idle machine
_registered = False


def runnable_threads() -> int:
    """How many threads of this process other than the calling one are running or runnable."""
    me = str(threading.get_native_id())
    count = 0
    for task in _TASKS.iterdir():
        if task.name == me:
            continue
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        if stat.rpartition(")")[2].split()[0] == "R":  # the name in parentheses may hold spaces
            count += 1
    return count


def threads() -> None:
    """Wait, GIL free, until the other threads have settled (or the limit is reached)."""
    if not _TASKS.is_dir():
        time.sleep(_FALLBACK_S)
        return
    deadline = time.monotonic() + _LIMIT_S
    quiet = 0
    while quiet < _QUIET_STEPS and time.monotonic() < deadline:
        time.sleep(_STEP_S)
        quiet = quiet + 1 if runnable_threads() == 0 else 0


def at_exit() -> None:
    """Settle the threads at exit, once however many callers ask (the emulation, verify's side,
    a test's sitecustomize): registered by the first, it runs after what is registered later."""
    global _registered
    if not _registered:
        atexit.register(threads)
        _registered = True
