"""emulation.settle: at exit the process waits, GIL free, for its runnable threads (gloo's workers
dropping a finished collective) before the interpreter finalises, and no longer than its limit."""

from __future__ import annotations

import threading
import time

import pytest

from npu_migrate.emulation import settle


def spin(until: threading.Event | float) -> None:
    while not (until.is_set() if isinstance(until, threading.Event) else time.monotonic() > until):
        pass


def test_a_runnable_thread_is_counted_and_waited_for() -> None:
    worker = threading.Thread(target=spin, args=(time.monotonic() + 0.5,))
    worker.start()
    try:
        assert settle.runnable_threads() >= 1
        settle.threads()
        assert not worker.is_alive()  # it ran to its end while the caller waited
    finally:
        worker.join()


def test_a_thread_that_never_settles_is_waited_for_no_longer_than_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(settle, "_LIMIT_S", 0.3)
    stop = threading.Event()
    worker = threading.Thread(target=spin, args=(stop,))
    worker.start()
    try:
        settle.threads()
        assert worker.is_alive()
    finally:
        stop.set()
        worker.join()


def test_without_proc_it_pauses_for_the_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settle, "_TASKS", settle._TASKS / "absent")
    slept: list[float] = []
    monkeypatch.setattr(settle.time, "sleep", slept.append)
    settle.threads()
    assert slept == [settle._FALLBACK_S]


def test_the_settle_is_registered_once_however_many_ask(monkeypatch: pytest.MonkeyPatch) -> None:
    registered: list[object] = []
    monkeypatch.setattr(settle, "_registered", False)
    monkeypatch.setattr(settle.atexit, "register", registered.append)
    settle.at_exit()
    settle.at_exit()
    assert registered == [settle.threads]
