"""npu-migrate's speed and memory on a real ~150k-line PyTorch model zoo (timm's sdist), against the
cost of merely parsing the same files, all measured in one run on one tree.

    python benchmarks/engine_speed.py [TREE] [--jobs N]

Without TREE, timm 1.0.31's sdist is downloaded once into ~/.cache/npu-migrate-bench/ and unpacked
there. The tree is copied to a temporary folder first, and every CLI run works on that copy (the
original is never modified), each a fresh `python -m npu_migrate` process whose cache goes to a
temporary XDG_CACHE_HOME, so no earlier run's cache is found.

Prints:
  * files and lines: every *.py file below TREE, and its newline count;
  * floor A: reading every file and parsing it with the stdlib's `ast.parse`, in this process;
  * floor B: reading every file and parsing it with `libcst.parse_module`, in this process. This is
    the baseline: what a tool that parses everything into a concrete syntax tree starts from;
  * cold scan: `scan TREE --format json -j N` with an empty cache, wall time of the whole process;
  * warm scan: the same again, the tree unchanged (equal to cold while the CLI has no cache);
  * one change: the same again after appending a line to one file (the largest that mentions cuda);
  * peak RSS of the cold scan: the largest resident set of any one of its processes (main or a
    worker), from wait4's rusage; on Linux also the sampled peak of all its processes together, an
    upper bound since forked workers share pages with their parent;
  * whether the JSON of the cold and warm scans is byte-identical;
  * apply --dry-run --no-cache on the copy (it writes nothing), wall time;
then each time as a ratio to floor B, and PASS/FAIL against the targets. Last, the same tree
against an older build (--baseline, default b9aa50c, the build before the static shape proofs;
a git worktree of it in the scratch folder, on PYTHONPATH), both in this run: CPU-seconds (the
process and its workers, from wait4's rusage) of a single-worker cold scan, of a warm rescan, and
of a one-file scan (timm's vision_transformer.py), this build's cold scan to be no slower.
Every CLI run uses compiled bytecode (a scratch PYTHONPYCACHEPREFIX, each build compiled
before it is timed), as an installed package does. Each measurement runs --repeat times
(default 3), the two builds taking turns, and the fastest counts, which keeps a busy
machine's noise out of the ratios; every cold scan starts from an empty cache folder of its own,
and apply runs --no-cache. Scan exits 1 when it finds something: that is not a failure. The
script always exits 0: it is a report."""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import libcst as cst

TIMM = "timm-1.0.31"
BENCH_CACHE = Path.home() / ".cache" / "npu-migrate-bench"
TOUCH = b"# touched\n"
# Targets: the cold scan as a fraction of floor B, seconds, and bytes.
COLD_VS_FLOOR = 0.25
WARM_SECONDS = 0.5
WARM_CPU_SECONDS = 0.3  # a warm rescan's CPU time, single worker
ONE_CHANGE_SECONDS = 1.0
PEAK_RSS_BYTES = 500 * 1000 * 1000
MIB = 1024 * 1024
BASELINE = "b9aa50c"  # the build before the static shape proofs (issue 42)
REPOSITORY = Path(__file__).resolve().parent.parent


def timm_tree() -> Path:
    """timm's unpacked sdist, downloaded and unpacked on first use."""
    target = BENCH_CACHE / TIMM
    if not (target / "timm").is_dir():
        BENCH_CACHE.mkdir(parents=True, exist_ok=True)
        archive = BENCH_CACHE / f"{TIMM}.tar.gz"
        if not archive.is_file():
            pin = TIMM.replace("-", "==", 1)
            download = ["pip", "download", "-q", "--no-deps", "--no-binary", ":all:", pin, "-d", BENCH_CACHE]
            subprocess.run([sys.executable, "-m", *map(str, download)], check=True)
        with tarfile.open(archive) as tar:
            if hasattr(tarfile, "data_filter"):  # refuse links and paths that leave the folder
                tar.extractall(BENCH_CACHE, filter="data")
            else:
                tar.extractall(BENCH_CACHE)  # Python < 3.11.4: a pinned sdist from PyPI
    return target


@dataclass
class Run:
    seconds: float
    returncode: int
    stdout: bytes
    stderr: bytes
    max_rss: int | None  # bytes, the largest single process (the run or a child it waited for)
    tree_rss: int | None  # bytes, the sampled peak of all its processes together (Linux)
    cpu: float | None  # user + system seconds of the run and the children it waited for


class TreeRss:
    """Samples the summed RSS of a process and its descendants from /proc until stopped (Linux only)."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.pid, self.interval, self.peak = pid, interval, 0
        self.available = Path(f"/proc/{pid}/task/{pid}/children").exists()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> TreeRss:
        if self.available:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self.available:
            self._thread.join()

    def _sample(self) -> None:
        page = os.sysconf("SC_PAGE_SIZE")
        while not self._stop.is_set():
            total, pending = 0, [self.pid]
            while pending:
                pid = pending.pop()
                with contextlib.suppress(OSError, ValueError, IndexError):  # it may exit meanwhile
                    total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
                    for task in Path(f"/proc/{pid}/task").iterdir():
                        pending += map(int, (task / "children").read_text().split())
            self.peak = max(self.peak, total)
            self._stop.wait(self.interval)


def run_cli(args: list[str], env: dict[str, str], cwd: Path, build: Path | None = None) -> Run:
    """One `python -m npu_migrate ARGS` process: wall time, CPU time, output and peak memory;
    `build`: a checkout of another build of npu-migrate, run instead of this one."""
    command = [sys.executable, "-m", "npu_migrate", *args]
    if build is not None:
        env = {**env, "PYTHONPATH": str(build)}
    with tempfile.TemporaryFile() as stderr:
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, env=env, cwd=cwd)
        assert process.stdout is not None
        with TreeRss(process.pid) as tree:
            stdout = process.stdout.read()
            process.stdout.close()
            if hasattr(os, "wait4"):  # the rusage of this child alone, with its workers
                _, status, usage = os.wait4(process.pid, 0)
                seconds = time.perf_counter() - start
                process.returncode = os.waitstatus_to_exitcode(status)
                scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB elsewhere
                max_rss: int | None = usage.ru_maxrss * scale
                cpu: float | None = usage.ru_utime + usage.ru_stime
            else:
                process.wait()
                seconds = time.perf_counter() - start
                max_rss = cpu = None
        stderr.seek(0)
        return Run(
            seconds,
            process.returncode,
            stdout,
            stderr.read(),
            max_rss,
            tree.peak if tree.available else None,
            cpu,
        )


def scan_ok(run: Run) -> bool:
    """Whether a scan produced its report (exit 1 means findings, 2 files it could not parse)."""
    try:
        return run.returncode in (0, 1, 2) and "findings" in json.loads(run.stdout)
    except ValueError:
        return False


def floor(label: str, files: list[Path], parse: Callable[[bytes], object], lines: int) -> float:
    start = time.perf_counter()
    for path in files:
        with contextlib.suppress(Exception):  # a file that cannot be parsed costs what it costs
            parse(path.read_bytes())
    seconds = time.perf_counter() - start
    print(f"{label:<48} {seconds:8.2f} s  {lines / seconds:>9,.0f} lines/s")
    return seconds


def show(label: str, run: Run, lines: int, ok: bool) -> None:
    rate = f"{lines / run.seconds:>9,.0f} lines/s" if ok else f"FAILED (exit {run.returncode})"
    print(f"{label:<48} {run.seconds:8.2f} s  {rate}")
    if not ok:
        tail = (run.stderr or run.stdout).decode(errors="replace").strip().splitlines()[-5:]
        print("\n".join(f"    | {line}" for line in tail))


def verdict(label: str, passed: bool, detail: str) -> None:
    print(f"  {'PASS' if passed else 'FAIL'}  {label:<36} {detail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", nargs="?", type=Path, help=f"source tree (default: {TIMM}'s sdist)")
    parser.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1, help="scan workers")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs of each measurement; the fastest counts (default 3)"
    )
    parser.add_argument(
        "--baseline", default=BASELINE, help=f"the older build compared in the same run (default {BASELINE})"
    )
    args = parser.parse_args()
    original = args.tree or timm_tree()
    if not original.is_dir():
        parser.error(f"{original} is not a folder")
    jobs = str(args.jobs)

    with tempfile.TemporaryDirectory(prefix="npu-migrate-bench-") as scratch:
        work = Path(scratch)
        tree = work / "tree"
        shutil.copytree(original, tree, symlinks=True)
        # Both builds run from compiled bytecode, as an installed package does (a machine that
        # sets PYTHONDONTWRITEBYTECODE would compile every module at every start), kept apart.
        env = {
            **os.environ,
            "XDG_CACHE_HOME": str(work / "xdg-cache"),
            "PYTHONPYCACHEPREFIX": str(work / "pyc"),
        }
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        files = sorted(p for p in tree.rglob("*.py") if p.is_file())
        sources = {p: p.read_bytes() for p in files}
        lines = sum(s.count(b"\n") for s in sources.values())
        print(f"tree: {original}")
        python = platform.python_version()
        print(f"{len(files):,} .py files, {lines:,} lines; {args.jobs} worker(s); Python {python}")
        print()
        repeat = range(max(1, args.repeat))
        floor_a = min(floor("floor A: read + ast.parse (1 process)", files, ast.parse, lines) for _ in repeat)
        floor_b = min(
            floor("floor B: read + libcst.parse_module (1 process)", files, cst.parse_module, lines)
            for _ in repeat
        )

        run_cli(["--help"], env, work)  # compile and page in the CLI's modules before timing anything
        scan = ["scan", str(tree), "--format", "json", "-j", jobs]
        colds = []
        for i in repeat:  # each cold run with a cache folder of its own
            colds.append(run_cli(scan, {**env, "XDG_CACHE_HOME": str(work / f"xdg-cold-{i}")}, work))
            show(f"cold scan -j{jobs}", colds[-1], lines, scan_ok(colds[-1]))
        cold = min(colds, key=lambda run: run.seconds)
        run_cli(scan, env, work)  # fills the cache the warm runs read
        warm = min((run_cli(scan, env, work) for _ in repeat), key=lambda run: run.seconds)
        show(f"warm scan -j{jobs} (unchanged tree)", warm, lines, scan_ok(warm))
        cuda = [p for p in files if b"cuda" in sources[p]] or files
        touched = max(cuda, key=lambda p: len(sources[p]))
        changes = []
        for _ in repeat:  # each run after one more line appended to the same file
            with touched.open("ab") as stream:
                stream.write(TOUCH)
            changes.append(run_cli(scan, env, work))
        changed = min(changes, key=lambda run: run.seconds)
        show(f"scan -j{jobs} after one change", changed, lines, scan_ok(changed))
        print(f"    (appended {TOUCH!r} to {touched.relative_to(tree)}, {len(sources[touched]):,} bytes)")
        applied = min(
            (run_cli(["apply", str(tree), "--dry-run", "--no-cache", "-j", jobs], env, work) for _ in repeat),
            key=lambda run: run.seconds,
        )
        apply_ok = applied.returncode in (0, 1, 2) and b"would rewrite" in applied.stdout
        show(f"apply --dry-run -j{jobs}", applied, lines, apply_ok)
        if apply_ok:
            print(f"    ({applied.stdout.decode(errors='replace').splitlines()[0].strip()})")

        print()
        if scan_ok(cold):
            summary = json.loads(cold.stdout).get("summary", {})
            counts = {
                k: len(v) if isinstance(v, list) else v for k, v in summary.items() if not isinstance(v, dict)
            }
            print("cold scan summary:", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        rss = f"{cold.max_rss / MIB:,.0f} MiB" if cold.max_rss is not None else "not measured"
        print(f"peak RSS of the cold scan, largest process:         {rss}")
        if cold.tree_rss is not None:
            print(f"peak RSS of the cold scan, all processes (sampled): {cold.tree_rss / MIB:,.0f} MiB")
        identical = scan_ok(cold) and all(run.stdout == warm.stdout for run in colds)
        print(f"cold and warm JSON byte-identical:                 {'yes' if identical else 'no'}")

        print()
        print(f"as a ratio to floor B (the fastest of {len(repeat)} runs each):")
        for label, seconds in [
            ("floor A (ast.parse)", floor_a),
            ("cold scan", cold.seconds),
            ("warm scan", warm.seconds),
            ("scan after one change", changed.seconds),
            ("apply --dry-run", applied.seconds),
        ]:
            print(f"  {label:<24} {seconds / floor_b:7.3f}x")

        print()
        print("targets:")
        verdict(
            f"cold scan <= {COLD_VS_FLOOR}x floor B",
            scan_ok(cold) and cold.seconds <= COLD_VS_FLOOR * floor_b,
            f"{cold.seconds / floor_b:.3f}x ({cold.seconds:.2f} s vs {floor_b:.2f} s)",
        )
        verdict(
            f"warm scan <= {WARM_SECONDS} s",
            scan_ok(warm) and warm.seconds <= WARM_SECONDS,
            f"{warm.seconds:.2f} s",
        )
        verdict(
            f"scan after one change < {ONE_CHANGE_SECONDS:g} s",
            scan_ok(changed) and changed.seconds < ONE_CHANGE_SECONDS,
            f"{changed.seconds:.2f} s",
        )
        verdict(
            f"peak RSS < {PEAK_RSS_BYTES // 1000**2} MB ({PEAK_RSS_BYTES / MIB:.1f} MiB)",
            scan_ok(cold) and cold.max_rss is not None and cold.max_rss < PEAK_RSS_BYTES,
            rss + " (largest process)",
        )
        verdict("cold == warm output", identical, "byte-identical" if identical else "differs")
        against_baseline(args.baseline, tree, env, work, repeat)


def against_baseline(commit: str, tree: Path, env: dict[str, str], work: Path, repeat: range) -> None:
    """This build and `commit`'s, on the same tree in the same run: cold, warm and one-file scans
    in CPU-seconds (single worker, the fastest of the repeats)."""
    baseline = work / "baseline"
    added = subprocess.run(
        ["git", "-C", str(REPOSITORY), "worktree", "add", "--detach", str(baseline), commit],
        capture_output=True,
        text=True,
        check=False,
    )
    if added.returncode:
        print(f"\nno baseline: git worktree add {commit} failed: {added.stderr.strip()}")
        return
    try:
        one = next(tree.rglob("vision_transformer.py"), None) or max(tree.rglob("*.py"), key=_size)
        builds = {f"baseline {commit}": baseline, "this build": REPOSITORY}
        scan = ["scan", "--format", "json", "-j", "1"]
        runs: dict[str, list[list[Run]]] = {label: [[], [], []] for label in builds}
        if _guard_typer_029_patch(baseline):
            print(f"\n(baseline {commit}: its help patch for typer 0.29 guarded: this typer has no hook)")
        for label, build in builds.items():
            started = run_cli(["--help"], env, work, build)  # its bytecode compiled before anything is timed
            if started.returncode:
                why = started.stderr.decode(errors="replace").strip().splitlines()[-1:]
                print(f"\nno baseline: {label} does not start here: {' '.join(why)}")
                return
        for i in repeat:  # the builds take turns, so that a busy spell of the machine hits both
            for label, build in builds.items():
                cache = {**env, "XDG_CACHE_HOME": str(work / f"b-{label}-{i}")}
                cold, warm, single = runs[label]
                cold.append(run_cli([*scan, str(tree)], cache, work, build))
                warm.append(run_cli([*scan, str(tree)], cache, work, build))  # its cache is full
                single.append(run_cli([*scan, "--no-cache", str(one)], env, work, build))
        figures = {
            label: [min(r.cpu or r.seconds for r in kind) for kind in kinds] for label, kinds in runs.items()
        }
        print()
        print(f"against the baseline, CPU-seconds (-j 1, fastest of {len(repeat)}):")
        print(f"  {'':<24} {'cold scan':>10} {'warm rescan':>12} {one.name:>24}")
        for label, (cold_cpu, warm_cpu, one_cpu) in figures.items():
            print(f"  {label:<24} {cold_cpu:>10.2f} {warm_cpu:>12.2f} {one_cpu:>24.2f}")
        ours, theirs = figures["this build"][0], figures[f"baseline {commit}"][0]
        verdict(f"cold scan no slower than {commit}", ours <= theirs, f"{ours:.2f} vs {theirs:.2f} CPU-s")
        warm_cpu = figures["this build"][1]
        verdict(
            f"warm rescan <= {WARM_CPU_SECONDS} CPU-s", warm_cpu <= WARM_CPU_SECONDS, f"{warm_cpu:.2f} CPU-s"
        )
    finally:
        subprocess.run(
            ["git", "-C", str(REPOSITORY), "worktree", "remove", "--force", str(baseline)],
            capture_output=True,
            check=False,
        )


def _guard_typer_029_patch(baseline: Path) -> bool:
    """Builds from 81e3e86 to before ea14650 patch a hook of typer 0.29 (the `<bool>` its help
    showed beside flags); pyproject.toml now keeps typer below 0.29, which has no such hook (and
    shows none): the baseline's patch is put under a test of the hook, in its scratch worktree
    only, so that it runs with this environment's packages as this build does."""
    import typer.core

    cli = baseline / "npu_migrate" / "cli" / "__init__.py"
    patch = "typer.core.TyperOption.display_type_rich = _flags_without_a_type("
    text = cli.read_text(encoding="utf-8") if cli.is_file() else ""
    if f"\n{patch}" not in text or hasattr(typer.core.TyperOption, "display_type_rich"):
        return False
    guarded = f'\nif hasattr(typer.core.TyperOption, "display_type_rich"):\n    {patch}'
    cli.write_text(text.replace(f"\n{patch}", guarded), encoding="utf-8")
    return True


def _size(path: Path) -> int:
    return path.stat().st_size


if __name__ == "__main__":
    main()
