"""The bundled GPU projects and how their expected results are produced.

Run `python -m tests.fixture_cases` to regenerate fixtures/<name>/expected and scan.json after
a deliberate behaviour change; review the diff before committing it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "src").is_dir())


CI_ROOTS = ("GITHUB_WORKSPACE", "CI_PROJECT_DIR")  # where a CI system's report paths start


def outside_ci() -> dict[str, str]:
    """This environment without the variables a CI system sets for its report paths: a test
    sets them itself where it means to."""
    return {name: value for name, value in os.environ.items() if name not in CI_ROOTS}


def run_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    """The installed console entry point, as a user runs it (outside CI unless `env` says so);
    `timeout`: a hang guard."""
    return subprocess.run(
        [sys.executable, "-m", "npu_migrate", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**outside_ci(), "COLUMNS": "200", **(env or {})},
        timeout=timeout,
        check=False,
    )


MARKER = "NPU_MIGRATE_TEST_RUN"  # in the environment of a run whose processes a test looks for


def left_running(marker: str) -> list[str]:
    """The processes still running whose environment holds MARKER=`marker` (a run's, and every
    process it started), after a minute's grace to go, by their command lines; each is then
    killed, so that a failing test leaves none behind."""
    import psutil

    marked = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.environ().get(MARKER) == marker:
                marked.append(process)
    _, alive = psutil.wait_procs(marked, timeout=60)
    left = []
    for process in alive:
        with contextlib.suppress(psutil.Error):
            if process.status() != psutil.STATUS_ZOMBIE:
                left.append(" ".join(process.cmdline()))
            process.kill()
    return left


def scan_json(name: str) -> dict:
    """What scan reports on a fixture, but the fingerprints: they name the file from the root of
    the checkout the fixture sits in (a clone or an unpacked archive), and are tested apart."""
    result = run_cli("scan", "src", "--format", "json", cwd=FIXTURES / name)
    assert result.returncode in (1, 2), result.stderr
    data = json.loads(result.stdout)
    for finding in data["findings"]:
        del finding["fingerprint"]
    return data


def apply_into(name: str, out: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(
        "apply",
        "src",
        "--out",
        str(out),
        "--change-list",
        str(out.parent / f"{name}-changes.csv"),
        cwd=FIXTURES / name,
    )


def main() -> None:
    for name in NAMES:
        expected = FIXTURES / name / "expected"
        shutil.rmtree(expected, ignore_errors=True)
        apply_into(name, expected)
        for stray in expected.parent.glob(f"{name}-changes.*"):
            stray.unlink()
        (FIXTURES / name / "scan.json").write_text(json.dumps(scan_json(name), indent=2) + "\n")
        print(f"regenerated {name}")


if __name__ == "__main__":
    main()
