"""What `run --emulate --forecast` costs on top of a plain emulated run of the same script, on
the forecast fixtures (nanoGPT's training loop for more epochs, apex's prefetcher loop, the
no_grad encoder): each run a fresh `python -m npu_migrate run --emulate` process, the two kinds
taking turns, timed by the CPU-seconds of the process (wait4's rusage) and by wall time; the
fastest of --repeat counts. Goal: the forecast under 1.5x the plain run's CPU time.

    python benchmarks/forecast_overhead.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "forecast"
SCRIPTS = [
    ["nanogpt_train.py", "--epochs", "12", "--log-interval", "0"],
    ["leaky_prefetcher.py"],
    ["encoder_inference.py"],
]
GOAL = 1.5


def timed(argv: list[str]) -> tuple[float, float]:
    """CPU-seconds and wall seconds of one CLI process."""
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "npu_migrate", "run", *argv],
        cwd=FIXTURES,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: npu-migrate run {' '.join(argv)}")
    return usage.ru_utime + usage.ru_stime, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    repeat = parser.parse_args().repeat
    worst = 0.0
    print(f"{'script':<40} {'plain CPU-s':>11} {'forecast CPU-s':>14} {'ratio':>6} {'wall ratio':>10}")
    for script in SCRIPTS:
        plain, forecast = [], []
        for _ in range(repeat):
            plain.append(timed(["--emulate", *script]))
            forecast.append(timed(["--emulate", "--forecast", *script]))
        cpu_plain, cpu_forecast = min(p[0] for p in plain), min(f[0] for f in forecast)
        wall_ratio = min(f[1] for f in forecast) / min(p[1] for p in plain)
        ratio = cpu_forecast / cpu_plain
        worst = max(worst, ratio)
        print(
            f"{' '.join(script):<40} {cpu_plain:>11.2f} {cpu_forecast:>14.2f} "
            f"{ratio:>6.2f} {wall_ratio:>10.2f}"
        )
    verdict = "PASS" if worst < GOAL else "FAIL"
    print(f"worst CPU ratio {worst:.2f} (goal < {GOAL}): {verdict}")
    return 0 if worst < GOAL else 1


if __name__ == "__main__":
    raise SystemExit(main())
