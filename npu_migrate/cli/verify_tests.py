"""`npu-migrate verify TREE --tests "pytest ARGS"`: the project's own tests on the original and on
its migrated copy (under the NPU emulation where no NPU is), compared test by test, each
regression bisected to the change that makes it (verify/tests.py, verify/bisect.py)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from npu_migrate.cli import common
from npu_migrate.write import copy_tree

if TYPE_CHECKING:
    from npu_migrate.cli.verify import _Copy
    from npu_migrate.verify.tests import SuiteComparison, SuiteRun

BISECTED = 5  # regressions the bisection looks at; each costs a test run per rule tried


def verify_tests(
    copy: _Copy, command: str, emulate: bool | None, timeout: float, bisect: bool, device: str | None = None
) -> SuiteComparison:
    """Both sides' tests, compared (the migrated copy's with `device` as torch's default, where
    given); the regressions' culprits where `bisect`."""
    from npu_migrate.emulation.runner import real_torch_npu_imports
    from npu_migrate.verify.tests import NotPytest, compare, pytest_arguments

    try:
        arguments = pytest_arguments(command)
    except NotPytest as exc:
        common.fail(str(exc))
    emulated = not real_torch_npu_imports() if emulate is None else emulate
    where = "the NPU emulation" if emulated else "the NPU"
    with tempfile.TemporaryDirectory(prefix="npu-migrate-tests-") as scratch:
        work = Path(scratch)
        # The user's tree is never run in. Both sides' roots have the same name (their parents are
        # temporary folders): a test that reads its own path does the same on both (mmengine's
        # logger test builds a regular expression from `__file__`, and a `+` in it matches no `+`).
        original_copy = work / "original" / copy.folder.name
        copy_tree(copy.tree, original_copy).rename(original_copy)
        original = _side("the original", original_copy, arguments, False, timeout, work / "original.jsonl")
        common.err.print(
            f"verify: tests on the original: {original.describe()}", markup=False, highlight=False
        )
        if not original.status:
            common.fail(f"no test ran on the original ({command}); pytest said:\n{original.output}")
        migrated = _side(f"the migrated copy ({where})", copy.folder, arguments, emulated, timeout,
                         work / "migrated.jsonl", device)  # fmt: skip
        common.err.print(
            f"verify: tests on the migrated copy ({where}): {migrated.describe()}",
            markup=False,
            highlight=False,
        )
        comparison = compare(command, original, migrated)
        if bisect and comparison.regressions:
            _bisect(copy, comparison, arguments, emulated, timeout, work, device)
    return comparison


def _side(
    name: str,
    folder: Path,
    arguments: list[str],
    emulate: bool,
    timeout: float,
    out: Path,
    device: str | None = None,
) -> SuiteRun:
    from npu_migrate.verify.tests import run_tests

    with common.err.status(f"tests on {name}") as status:

        def progress(done: int) -> None:
            status.update(f"tests on {name}: {done} done")

        return run_tests(folder, arguments, emulate, timeout, out, progress=progress, default_device=device)


def _bisect(
    copy: _Copy,
    comparison: SuiteComparison,
    arguments: list[str],
    emulate: bool,
    timeout: float,
    work: Path,
    device: str | None,
) -> None:
    """For each regression (the first few), the rule and file whose changes break it."""
    from npu_migrate.verify.bisect import find_culprit
    from npu_migrate.verify.tests import PASSED, run_tests

    for regression in comparison.regressions[:BISECTED]:

        def passes(folder: Path, test: str = regression.test) -> bool:
            run = run_tests(
                folder, arguments, emulate, timeout, work / "bisect.jsonl", only=[test], default_device=device
            )
            return run.status.get(test) in PASSED

        with common.err.status(f"finding the change that breaks {regression.test}"):
            culprit = find_culprit(copy.outcomes, copy.rules, copy.migrate, copy.write, passes)
        regression.culprit = culprit.describe() if culprit else "no single rule's changes make the difference"
    comparison.bisected = min(len(comparison.regressions), BISECTED)


def print_comparison(comparison: SuiteComparison) -> None:
    from npu_migrate.verify.tests import reach_line

    def out(line: str) -> None:  # test ids and messages are the project's text, never markup
        common.out.print(line, markup=False, highlight=False, emoji=False)

    out(f"reach: {reach_line(comparison.migrated)}")
    for reason, count in comparison.migrated.skip_reasons()[:5]:
        cuda = any(word in reason.lower() for word in ("cuda", "gpu"))
        gate = "; it asks for CUDA GPUs, which an NPU host never has (the scan's NPU854 names such gates)"
        out(f"  skipped on the migrated copy: {count} test(s): {reason}{gate if cuda else ''}")
    if comparison.regressions:
        count = len(comparison.regressions)
        out(f"FAIL: {count} test(s) passed on the original and fail on the migrated copy:")
        for regression in comparison.regressions:
            out(f"  {regression.test}: {regression.after}: {regression.message}")
            if regression.culprit:
                out("    " + regression.culprit.replace("\n", "\n    "))
        unbisected = len(comparison.regressions) - comparison.bisected
        if unbisected and comparison.bisected:
            out(f"  ({unbisected} more not bisected: fix the ones above first)")
    if comparison.not_run:
        count = len(comparison.not_run)
        out(f"FAIL: {count} test(s) passed on the original and did not run on the migrated copy:")
        for test in comparison.not_run[:20]:
            out(f"  {test}")
    if comparison.migrated.stopped:
        out("FAIL: the migrated copy's tests ran past --timeout and were stopped")
    if comparison.skipped:
        count = len(comparison.skipped)
        out(f"note: {count} test(s) passed on the original and are skipped on the migrated copy:")
        for change in comparison.skipped[:10]:
            out(f"  {change.test}: {change.message}")
    if comparison.newly_failing:
        count = len(comparison.newly_failing)
        out(
            f"note: {count} test(s) skipped on the original (they need an accelerator) fail on the "
            "migrated copy:"
        )
        for change in comparison.newly_failing[:10]:
            out(f"  {change.test}: {change.after}: {change.message}")
    if comparison.newly_run:
        outcomes: dict[str, int] = {}
        for change in comparison.newly_run:
            outcomes[change.after] = outcomes.get(change.after, 0) + 1
        tally = ", ".join(f"{count} {status}" for status, count in outcomes.items())
        count = len(comparison.newly_run)
        out(f"note: {count} test(s) skipped on the original run on the migrated copy: {tally}")
    if comparison.fixed:
        out(f"note: {len(comparison.fixed)} test(s) failed on the original and pass on the migrated copy")
    if comparison.passed:
        kept = sum(status in ("passed", "xfailed") for status in comparison.original.status.values())
        skipped = f" ({len(comparison.skipped)} of them skipped there)" if comparison.skipped else ""
        out(
            f"PASS: none of the {kept} test(s) that passed on the original fails on the migrated "
            f"copy{skipped}"
        )
