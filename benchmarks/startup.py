"""How long the command line takes for the calls a pre-commit hook or a CI step makes, against the
interpreter starting and doing nothing, measured in the same run: issue 23's target is 0.3 s over
`python -c pass` for `--version` and for a one-file scan.

    python benchmarks/startup.py [--repeat N] [--importtime]

It runs what a user runs, this environment's `npu-migrate` console script (beside sys.executable),
in a temporary folder outside any git repository and configuration. The cases:
  * python -c pass: the interpreter alone, the baseline;
  * npu-migrate --version and --help;
  * npu-migrate scan of one file without CUDA code (no rule can match it) and of one with a single
    `.cuda()` call, each cold (an empty cache folder for every run: the rules are loaded and
    checked, the file looked at), new (a copy of a cache folder that a scan of another file
    filled: the rule set has run before, this file has not, a pre-commit hook's usual run) and
    warm (one cache folder, filled by an untimed first run: the file's result is in it).
Each case runs --repeat times (default 10), the cases taking turns so that a busy machine's load
falls on all of them alike; the table gives the median and the fastest run, and each over the
baseline's. PASS/FAIL compares the fastest with the target, as benchmarks/engine_speed.py does:
on a shared machine the fastest run is the one least slowed by others' work (the median is shown
beside it, and says how much a busy machine adds). Beside each case: which of libcst,
pydantic and yaml it imports, in any of its processes (one more run, with PYTHONPROFILEIMPORTTIME).
--importtime also prints the modules `--version` spends the most time importing.

Every case runs once, untimed, before the timed runs, and PYTHONDONTWRITEBYTECODE is dropped from
their environment, so that they start from compiled bytecode as an installed package does.
A scan that finds the `.cuda()` call exits 1: that is its expected exit code, not a failure. The
script always exits 0: it is a report."""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

TARGET_SECONDS = 0.3  # over the baseline
WATCHED = ("libcst", "pydantic", "yaml")  # the imports that cost the most (libcst ~0.3 s alone)
PLAIN = "import math\n\n\ndef norm(x, y):\n    return math.hypot(x, y)\n"
CUDA = "import torch\n\nmodel = torch.nn.Linear(4, 4).cuda()\n"


@dataclass
class Case:
    label: str
    command: list[str]
    expected_exit: int = 0
    cache: str = "none"  # none (no scan), cold, new or warm (see the module's docstring)
    seconds: list[float] = field(default_factory=list)
    imports: list[str] = field(default_factory=list)


def console_script() -> list[str]:
    beside = Path(sys.executable).with_name("npu-migrate")
    found = str(beside) if beside.exists() else shutil.which("npu-migrate")
    if found:
        return [found]
    print("no npu-migrate console script found: timing `python -m npu_migrate` instead")
    return [sys.executable, "-m", "npu_migrate"]


def cache_for(case: Case, work: Path) -> Path:
    """The cache folder of one run: cold, an empty one; new, a copy of the seeded one."""
    if case.cache == "cold":
        return Path(tempfile.mkdtemp(dir=work, prefix="cold-"))
    if case.cache == "new":
        return Path(
            shutil.copytree(work / "seeded", tempfile.mkdtemp(dir=work, prefix="new-"), dirs_exist_ok=True)
        )
    return work / "warm"


def run(
    case: Case,
    work: Path,
    env: dict[str, str],
    extra_env: dict[str, str] | None = None,
    cache: Path | None = None,
) -> str:
    """One run of the case; its stderr."""
    cache = cache or cache_for(case, work)
    result = subprocess.run(
        case.command,
        cwd=work,
        env={**env, "XDG_CACHE_HOME": str(cache), **(extra_env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    if result.returncode != case.expected_exit:
        sys.exit(f"{case.label}: exit {result.returncode}, expected {case.expected_exit}\n{result.stderr}")
    return result.stderr


def timed(case: Case, work: Path, env: dict[str, str]) -> None:
    cache = cache_for(case, work)  # made before the clock starts
    start = time.perf_counter()
    run(case, work, env, cache=cache)
    case.seconds.append(time.perf_counter() - start)


def imported(stderr: str) -> dict[str, int]:
    """PYTHONPROFILEIMPORTTIME's lines: each module and its cumulative microseconds."""
    modules = {}
    for line in stderr.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if line.startswith("import time:") and len(parts) == 3 and parts[1].strip().isdigit():
            modules[parts[2].rstrip()] = int(parts[1])
    return modules


def main() -> None:
    parser = argparse.ArgumentParser(description="npu-migrate's start-up against `python -c pass`.")
    parser.add_argument("--repeat", type=int, default=10, help="timed runs of each case")
    parser.add_argument("--importtime", action="store_true", help="the slowest imports of --version")
    args = parser.parse_args()
    cli = console_script()
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    env["COLUMNS"] = "120"
    baseline = Case("python -c pass (baseline)", [sys.executable, "-c", "pass"])
    cases = [
        baseline,
        Case("npu-migrate --version", [*cli, "--version"]),
        Case("npu-migrate --help", [*cli, "--help"]),
        Case("scan, no CUDA code, cold", [*cli, "scan", "plain.py"], cache="cold"),
        Case("scan, no CUDA code, new", [*cli, "scan", "plain.py"], cache="new"),
        Case("scan, no CUDA code, warm", [*cli, "scan", "plain.py"], cache="warm"),
        Case("scan, one .cuda() call, cold", [*cli, "scan", "cuda.py"], 1, "cold"),
        Case("scan, one .cuda() call, new", [*cli, "scan", "cuda.py"], 1, "new"),
        Case("scan, one .cuda() call, warm", [*cli, "scan", "cuda.py"], 1, "warm"),
    ]
    with tempfile.TemporaryDirectory(prefix="npu-migrate-startup-") as folder:
        work = Path(folder)
        (work / "plain.py").write_text(PLAIN)
        (work / "cuda.py").write_text(CUDA)
        (work / "seed.py").write_text("x = 1\n")
        seeding = Case("seed", [*cli, "scan", "seed.py"])
        run(seeding, work, env, cache=work / "seeded")
        for case in cases:  # untimed: bytecode written, the warm cache filled
            run(case, work, env)
            stderr = run(case, work, env, {"PYTHONPROFILEIMPORTTIME": "1"})
            case.imports = [name for name in WATCHED if name in {m.strip() for m in imported(stderr)}]
        for _ in range(args.repeat):
            for case in cases:
                timed(case, work, env)
        version_imports = imported(run(cases[1], work, env, {"PYTHONPROFILEIMPORTTIME": "1"}))

    python = f"Python {platform.python_version()}, {os.cpu_count()} CPU(s)"
    print(f"{' '.join(cli)}: {args.repeat} run(s) of each case, {python}")
    print()
    columns = f"{'median':>8} {'fastest':>8}  {'+median':>8} {'+fastest':>8}"
    print(f"{'case':<30} {columns}  {'imports':<24} target")
    base_median, base_fastest = statistics.median(baseline.seconds), min(baseline.seconds)
    for case in cases:
        median, fastest = statistics.median(case.seconds), min(case.seconds)
        over = "" if case is baseline else f"{median - base_median:+8.3f} {fastest - base_fastest:+8.3f}"
        verdict = "" if case is baseline else ("PASS" if fastest - base_fastest < TARGET_SECONDS else "FAIL")
        imports = ", ".join(case.imports) or "-"
        row = f"{case.label:<30} {median:6.3f} s {fastest:6.3f} s  {over:<17}  {imports:<24} {verdict}"
        print(row.rstrip())
    print()
    print("+: over the baseline's median or fastest run")
    print(f"target: under {TARGET_SECONDS} s over the baseline (each case's fastest run against its fastest)")
    if args.importtime:
        print()
        print("npu-migrate --version, its slowest imports (cumulative, nested as -X importtime nests them):")
        for name, micros in sorted(version_imports.items(), key=lambda item: -item[1])[:15]:
            print(f"  {micros / 1000:7.1f} ms  {name}")


if __name__ == "__main__":
    main()
