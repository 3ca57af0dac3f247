"""A pytest plugin that `verify --tests` loads into each side's test run (`-p`): it writes one
JSON line per test as the test ends (so a run stopped at its time limit still tells what it
finished), and with NPU_MIGRATE_ONLY runs only the tests named there (the bisection reruns the
tests that broke). Needs nothing but pytest."""

from __future__ import annotations

import json
import os
from typing import Any

OUTCOMES = "NPU_MIGRATE_OUTCOMES"  # the JSON-lines file to append to
ONLY = "NPU_MIGRATE_ONLY"  # node ids, one per line: run these only


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    only = os.environ.get(ONLY)
    if not only:
        return
    wanted = set(only.splitlines())
    kept = [item for item in items if item.nodeid in wanted]
    config.hook.pytest_deselected(items=[item for item in items if item.nodeid not in wanted])
    items[:] = kept


def pytest_runtest_logreport(report: Any) -> None:
    """A test's phase: setup, call or teardown. A failure outside the call is an error."""
    path = os.environ.get(OUTCOMES)
    if not path:
        return
    status = _status(report)
    if status is None:
        return
    message = _message(report) if report.failed or report.skipped else ""
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps({"test": report.nodeid, "status": status, "message": message}) + "\n")


def _message(report: Any) -> str:
    """A failure's error line (pytest's `E   ...`) and where it was raised; a skip's reason."""
    lines = [line for line in (getattr(report, "longreprtext", "") or "").splitlines() if line.strip()]
    if not lines:
        return ""
    if report.skipped:
        return lines[0][:300]
    error = next((line[1:].strip() for line in lines if line.startswith("E ")), "")
    return (f"{error} ({lines[-1].strip()})" if error else lines[-1].strip())[:300]


def _status(report: Any) -> str | None:
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed" if report.when == "call" else None
    if report.failed:
        return "failed" if report.when == "call" else "error"
    if report.skipped:
        return "skipped"
    return "passed" if report.when == "call" else None
