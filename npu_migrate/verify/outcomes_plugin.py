"""A pytest plugin that `verify --tests` loads into each side's test run (`-p`): it writes one
JSON line per test as the test ends (so a run stopped at its time limit still tells what it
finished), and one saying whether the test put a tensor on the NPU (its reach: a suite that
builds everything on the CPU passes without testing the migration), and with NPU_MIGRATE_ONLY
runs only the tests named there (the bisection reruns the tests that broke), and with
NPU_MIGRATE_DEFAULT_DEVICE makes that torch's default device. Needs nothing but pytest (and torch
for the last)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

OUTCOMES = "NPU_MIGRATE_OUTCOMES"  # the JSON-lines file to append to
ONLY = "NPU_MIGRATE_ONLY"  # node ids, one per line: run these only
DEFAULT_DEVICE = "NPU_MIGRATE_DEFAULT_DEVICE"  # torch's default device for the run (`--tests-device`)


def pytest_configure(config: Any) -> None:
    """Tensors made without a device go to DEFAULT_DEVICE: a suite written for the CPU default
    then runs the migrated code on the NPU."""
    device = os.environ.get(DEFAULT_DEVICE)
    if device:
        import torch

        if device.split(":")[0] == "npu":
            import torch_npu  # noqa: F401  (the NPU's device type)
        torch.set_default_device(device)


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    only = os.environ.get(ONLY)
    if not only:
        return
    wanted = set(only.splitlines())
    kept = [item for item in items if item.nodeid in wanted]
    config.hook.pytest_deselected(items=[item for item in items if item.nodeid not in wanted])
    items[:] = kept


_placed_before: dict[str, int] = {}


def _placed() -> int | None:
    """How many tensors went onto the NPU so far: the emulation counts them; a real NPU's
    allocator says whether any was allocated since the test started. None: no NPU in use."""
    emulated = sys.modules.get("npu_migrate.emulation.state")
    if emulated is not None and emulated.installed:
        return int(emulated.placed)
    if "torch_npu" in sys.modules:
        return int(sys.modules["torch_npu"].npu.max_memory_allocated())
    return None


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    if "torch_npu" in sys.modules and "npu_migrate.emulation.state" not in sys.modules:
        sys.modules["torch_npu"].npu.reset_peak_memory_stats()
    _placed_before[nodeid] = _placed() or 0


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    """Whether the test (its fixtures included) put a tensor on the NPU."""
    path = os.environ.get(OUTCOMES)
    if not path:
        return
    placed = _placed()
    reached = placed is not None and placed > _placed_before.pop(nodeid, 0)
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps({"test": nodeid, "npu": reached}) + "\n")


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
    if report.skipped and isinstance(report.longrepr, tuple):  # (path, line, "Skipped: reason")
        return str(report.longrepr[2]).removeprefix("Skipped: ")[:300]
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
