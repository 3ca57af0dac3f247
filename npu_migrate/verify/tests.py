"""`verify TREE --tests "pytest ARGS"`: a project's own tests, run on the original as it runs
here and on the migrated copy under the NPU emulation (or on a real NPU), compared test by test.
A test that passed on the original and does not on the migrated copy is a regression of the
migration; the bisection (verify/bisect.py) names the rule and file whose changes break it.

The parent only starts processes (no torch here): each side is pytest in its own process group,
in its own copy of the tree, with a plugin (verify/outcomes_plugin.py) that writes each test's
outcome as it ends, so a side stopped at its time limit still counts what it finished."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from npu_migrate.processes import stop
from npu_migrate.verify.outcomes_plugin import DEFAULT_DEVICE, ONLY, OUTCOMES

# The worst outcome of a test's phases wins: a teardown error after a passed call is an error.
_RANK = {"passed": 0, "xfailed": 0, "skipped": 1, "xpassed": 2, "failed": 3, "error": 4}
PASSED = frozenset({"passed", "xfailed"})


class NotPytest(ValueError):
    pass


def pytest_arguments(command: str) -> list[str]:
    """The arguments of a pytest command line (`pytest ARGS`, `python -m pytest ARGS`)."""
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise NotPytest(f"--tests {command!r}: {exc}") from None
    if words[:1] and Path(words[0]).name in ("pytest", "py.test"):
        return words[1:]
    if len(words) >= 3 and Path(words[0]).name.startswith("python") and words[1:3] == ["-m", "pytest"]:
        return words[3:]
    raise NotPytest(
        f"--tests takes a pytest command (`pytest ARGS` or `python -m pytest ARGS`), got {command!r}: "
        "the outcomes are compared test by test"
    )


@dataclass
class SuiteRun:
    """One side's tests: each test's outcome (`status`, the failure's last line)."""

    status: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    exit_code: int = 0
    stopped: bool = False  # it ran past its time limit
    output: str = ""  # the last lines pytest printed
    on_npu: list[str] = field(default_factory=list)  # the tests that put a tensor on the NPU

    def skip_reasons(self) -> list[tuple[str, int]]:
        """Why tests were skipped, the commonest reason first, with how many it skipped."""
        reasons: dict[str, int] = {}
        for test, status in self.status.items():
            if status == "skipped":
                reason = self.messages.get(test, "") or "(no reason given)"
                reasons[reason] = reasons.get(reason, 0) + 1
        return sorted(reasons.items(), key=lambda item: -item[1])

    def reach(self) -> tuple[int, int]:
        """(tests that put a tensor on the NPU, tests that ran: not skipped)."""
        ran = {test for test, status in self.status.items() if status != "skipped"}
        return len(ran & set(self.on_npu)), len(ran)

    def counts(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for status in self.status.values():
            found[status] = found.get(status, 0) + 1
        return dict(sorted(found.items()))

    def describe(self) -> str:
        counts = ", ".join(f"{n} {status}" for status, n in self.counts().items()) or "no test ran"
        stopped = " (stopped at the time limit)" if self.stopped else ""
        return f"{counts} in {self.seconds:.1f} s{stopped}"


def run_tests(
    folder: Path,
    arguments: Sequence[str],
    emulate: bool,
    timeout: float,
    outcomes: Path,
    only: Sequence[str] = (),
    progress: Callable[[int], None] = lambda done: None,
    default_device: str | None = None,
) -> SuiteRun:
    """Run pytest with `arguments` in `folder` (with the NPU emulation first on the path when
    `emulate`, torch's default device `default_device` where given), reporting how many tests
    are done while it runs."""
    outcomes.unlink(missing_ok=True)
    env = {**os.environ, OUTCOMES: str(outcomes), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTEST_ADDOPTS", None)
    path = [str(folder), env.get("PYTHONPATH", "")]
    if emulate:
        from npu_migrate.emulation import SITE

        path.insert(0, str(SITE))
    env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
    if only:
        env[ONLY] = "\n".join(only)
    if default_device:
        env[DEFAULT_DEVICE] = default_device
    command = [sys.executable, "-m", "pytest", "-p", "npu_migrate.verify.outcomes_plugin",
               "-p", "no:cacheprovider", *arguments]  # fmt: skip
    started = time.monotonic()
    process = subprocess.Popen(
        command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,  # its own process group: stopped with everything it started
    )  # fmt: skip
    run = SuiteRun()
    try:
        output = _wait(process, started + timeout, outcomes, progress)
        run.stopped = output is None
        if output is None:
            stop(process)
            output = process.communicate()[0]
    finally:
        stop(process)
    run.seconds = time.monotonic() - started
    run.exit_code = process.returncode
    run.output = "\n".join(output.splitlines()[-40:])
    records = _records(outcomes)
    run.on_npu = sorted({r["test"] for r in records if r.get("npu")})
    for record in (r for r in records if "status" in r):
        test, status, current = record["test"], record["status"], run.status.get(record["test"])
        if current is None or _RANK[status] > _RANK[current]:
            run.status[test] = status
            if record["message"]:
                run.messages[test] = record["message"]
    return run


def _wait(
    process: subprocess.Popen[str], deadline: float, outcomes: Path, progress: Callable[[int], None]
) -> str | None:
    """pytest's output once it ends, or None at the deadline; the count of finished tests meanwhile."""
    while True:
        try:
            return process.communicate(timeout=max(0.0, min(1.0, deadline - time.monotonic())))[0]
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                return None
            progress(len({r["test"] for r in _records(outcomes)}))


def _records(outcomes: Path) -> list[dict[str, str]]:
    if not outcomes.exists():
        return []
    records = []
    for line in outcomes.read_text(encoding="utf-8", errors="replace").splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            records.append(json.loads(line))
    return records


@dataclass
class Regression:
    test: str
    before: str
    after: str
    message: str  # the migrated side's failure, its last line
    culprit: str | None = None  # the change that breaks it (verify/bisect.py), in words


@dataclass
class SuiteComparison:
    command: str
    original: SuiteRun
    migrated: SuiteRun
    regressions: list[Regression]
    fixed: list[str]  # failed on the original, pass on the migrated copy
    not_run: list[str]  # passed on the original, did not run on the migrated copy
    skipped: list[Regression]  # passed on the original, skipped on the migrated copy (its skip condition)
    newly_failing: list[Regression]  # skipped on the original (needs a device), fail on the migrated copy
    newly_run: list[Regression] = field(
        default_factory=list
    )  # skipped on the original, ran on the migrated copy
    bisected: int = 0  # regressions the bisection looked at (the others are named without a culprit)

    @property
    def passed(self) -> bool:
        return not self.regressions and not self.not_run and not self.migrated.stopped

    def as_dict(self) -> dict:
        return {
            "command": self.command,
            "passed": self.passed,
            "original": {**asdict(self.original), "counts": self.original.counts()},
            "migrated": {
                **asdict(self.migrated),
                "counts": self.migrated.counts(),
                "reach": self.migrated.reach(),
            },
            "regressions": [asdict(r) for r in self.regressions],
            "fixed": self.fixed,
            "not_run": self.not_run,
            "skipped": [asdict(r) for r in self.skipped],
            "newly_failing": [asdict(r) for r in self.newly_failing],
            "newly_run": [asdict(r) for r in self.newly_run],
            "bisected": self.bisected,
        }


def compare(command: str, original: SuiteRun, migrated: SuiteRun) -> SuiteComparison:
    """Test by test: what passed before and does not after."""
    regressions, fixed, not_run, skipped, newly_failing, newly_run = [], [], [], [], [], []
    for test, before in sorted(original.status.items()):
        after = migrated.status.get(test)
        change = Regression(test, before, after or "", migrated.messages.get(test, ""))
        if before in PASSED and after is None:
            not_run.append(test)
        elif before in PASSED and after == "skipped":
            skipped.append(change)  # a skip condition that now holds (`requires only a CPU`): not a failure
        elif before in PASSED and after not in PASSED:
            regressions.append(change)
        elif before in ("failed", "error") and after in PASSED:
            fixed.append(test)
        elif before == "skipped" and after not in (None, "skipped"):
            newly_run.append(change)
            if after in ("failed", "error"):
                newly_failing.append(change)
    return SuiteComparison(
        command, original, migrated, regressions, fixed, not_run, skipped, newly_failing, newly_run
    )


def reach_line(run: SuiteRun) -> str:
    """How many of the migrated copy's tests reached the NPU, in words."""
    reached, ran = run.reach()
    line = f"{reached} of the {ran} test(s) that ran on the migrated copy put a tensor on the NPU"
    if ran and reached < ran:
        line += "; the others ran on the CPU only and test nothing of the migration's device code"
    return line


def html_report(comparison: SuiteComparison) -> str:
    """A self-contained page: both sides' counts, then each regression and what breaks it."""
    from html import escape

    rows = "".join(
        f"<tr><td><code>{escape(r.test)}</code></td><td>{escape(r.before)}</td><td>{escape(r.after)}</td>"
        f"<td>{escape(r.message)}</td><td><pre>{escape(r.culprit or '')}</pre></td></tr>"
        for r in comparison.regressions
    )
    verdict = "PASS" if comparison.passed else "FAIL"
    not_run = "".join(f"<li><code>{escape(t)}</code></li>" for t in comparison.not_run)
    return (
        "<!doctype html><meta charset=utf-8><title>npu-migrate verify --tests</title>"
        "<style>body{font:14px sans-serif;margin:2em}td,th{border:1px solid #ccc;padding:4px;"
        "vertical-align:top}table{border-collapse:collapse}pre{margin:0}</style>"
        f"<h1>{verdict}: <code>{escape(comparison.command)}</code></h1>"
        f"<p>original: {escape(comparison.original.describe())}<br>"
        f"migrated: {escape(comparison.migrated.describe())}<br>"
        f"{escape(reach_line(comparison.migrated))}</p>"
        f"<h2>{len(comparison.regressions)} regression(s)</h2>"
        "<table><tr><th>test</th><th>original</th><th>migrated</th><th>failure</th><th>the change that "
        f"breaks it</th></tr>{rows}</table>"
        + (
            f"<h2>passed on the original, did not run on the migrated copy</h2><ul>{not_run}</ul>"
            if not_run
            else ""
        )
    )
