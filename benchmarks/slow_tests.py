"""The suite's slow tests (tests/slow_tests.txt: real projects and whole trainings on the NPU
emulation), which `pytest` leaves out so that CI ends in minutes: run them, report each one's
time (pytest's --durations) and the whole run's wall time and CPU-seconds, and fail where one
fails. Run before a change to the emulation,
verify or the forecast lands.

    python benchmarks/slow_tests.py [-n WORKERS] [PYTEST ARGS...]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", "--workers", default="auto", help="pytest-xdist workers (default: auto)")
    options, pytest_args = parser.parse_known_args()
    command = [sys.executable, "-m", "pytest", "-q", "-m", "slow", "-n", options.workers, "--durations=0"]
    start = time.monotonic()
    done = subprocess.run([*command, *pytest_args], cwd=ROOT, check=False)
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        f"slow tests: exit {done.returncode}, {time.monotonic() - start:.0f} s wall, "
        f"{used.ru_utime + used.ru_stime:.0f} CPU-s"
    )
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
