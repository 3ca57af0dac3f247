"""The processes `run` and `verify` start are gone when the run ends, however it ends (its time
limit, a signal, a failing rank), and so is every process they start. A process group does not
hold them: torchrun starts each rank in a session of its own, and a daemon leaves its parent. So
the run adopts its descendants' orphans (Linux's child subreaper) and, at the end, finds every
descendant it has by /proc's parent links, stops each (so none starts another meanwhile), then
kills them all."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from npu_migrate.interrupt import STOPPING

_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
_SETTLE_SECONDS = 10.0  # how long a signalled process may take to stop or go (one in uninterruptible sleep)
_STOPPED_STATES = frozenset("TtZX")  # /proc's states of a process that runs no more


@contextmanager
def contained() -> Iterator[None]:
    """Every process started inside the block, and every process those start, is gone when the
    block ends."""
    adopt_orphans()
    try:
        yield
    finally:
        end_descendants()


def adopt_orphans() -> None:
    """A process whose parent ends below this one (a daemon's double fork, torchrun's ranks once
    torchrun is killed) becomes this process's child, not init's: end_descendants still finds it."""
    prctl(_PR_SET_CHILD_SUBREAPER, 1)


def prctl(option: int, value: int) -> None:
    """Linux's prctl(2) on this process, through the C library's (nothing where there is none)."""
    import ctypes  # here: only the processes that set an option need it

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(option, value)


def stop(process: subprocess.Popen[Any]) -> None:
    """Kill the process and every process it started, ranks in sessions of their own and orphans
    included: every descendant of this one is the process's (verify runs one at a time)."""
    end_descendants(spare=process.pid)
    process.wait()


def shell_status(returncode: int) -> int:
    """A child's exit status as a shell gives it: 128 + the signal that killed it (Popen's
    negative returncode, which an exit would take modulo 256: 241 for SIGTERM)."""
    return 128 - returncode if returncode < 0 else returncode


def end_descendants(spare: int | None = None) -> None:
    """Kill every descendant of this process and reap those that are (or became, orphaned) its
    children, but `spare` (a child whose Popen reaps it). The signals that stop a run wait until it is
    done: an interruption halfway would leave processes stopped, not killed."""
    with _signals_deferred():
        doomed = _frozen()
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _reap(doomed, spare)


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """The signals that stop a run, arriving inside the block, take effect once it is done, through the
    handlers they had (the main thread's to change; elsewhere they are left alone)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    handlers = {each: signal.getsignal(each) for each in STOPPING}
    for each, handler in handlers.items():
        if handler is not None:  # None: a handler set outside Python, which cannot be put back
            signal.signal(each, lambda signum, frame: arrived.append(signum))
    try:
        yield
    finally:
        for each, handler in handlers.items():
            if handler is not None:
                signal.signal(each, handler)
        if arrived:
            signal.raise_signal(arrived[0])


def _table() -> dict[int, tuple[str, int]]:
    """Every process's (state, parent), from /proc (empty where there is none)."""
    table = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:  # gone since the listing
                continue
            state, parent = stat.rpartition(")")[2].split()[:2]  # the name in parentheses may hold spaces
            table[int(entry.name)] = (state, int(parent))
    return table


def _descendants(table: dict[int, tuple[str, int]]) -> set[int]:
    """This process's descendants in `table`."""
    children: dict[int, list[int]] = {}
    for pid, (_, parent) in table.items():
        children.setdefault(parent, []).append(pid)
    found: set[int] = set()
    todo = [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _frozen() -> set[int]:
    """This process's descendants, each stopped (SIGSTOP) before the next look, until a look
    finds none new: none is left running to start another."""
    stopped: set[int] = set()
    while True:
        new = _descendants(_table()) - stopped
        if not new:
            return stopped
        for pid in new:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        _settled(new, lambda pid, state, parent: state in _STOPPED_STATES)
        stopped |= new


def _reap(doomed: set[int], spare: int | None) -> None:
    """Wait for the killed processes to go, reaping each that is this process's child (an
    orphan is once its parent is gone) but `spare`."""
    me = os.getpid()

    def gone(pid: int, state: str, parent: int) -> bool:
        if parent == me and pid != spare:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            return True
        return parent not in doomed  # spare, or one init reaps (no subreaper here)

    _settled(doomed, gone)


def _settled(pids: set[int], done: Callable[[int, str, int], bool]) -> None:
    """Wait until each of `pids` is gone or `done` with it (given its pid, state and parent),
    for at most _SETTLE_SECONDS."""
    left = set(pids)
    deadline = time.monotonic() + _SETTLE_SECONDS
    while left and time.monotonic() < deadline:
        table = _table()
        left = {pid for pid in left if pid in table and not done(pid, *table[pid])}
        if left:
            time.sleep(0.01)
