"""npu-migrate scan on real model code: the transformers, diffusers and accelerate wheels from
PyPI (downloaded once into a cache folder), against libcst's bare parse of the same files.

    python benchmarks/real_world.py [--cache DIR] [--jobs N]

Prints, per package: files and lines, how many the prefilter let through, the scan's wall time
with one worker and with N, and the time libcst needs merely to parse every file (the floor a
tool that parses everything starts from)."""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import libcst as cst

from npu_migrate.engine.index import RuleIndex
from npu_migrate.rules.load import load_rules

PACKAGES = ["transformers", "diffusers", "accelerate"]


def unpack(package: str, cache: Path) -> Path:
    target = cache / package
    if not target.is_dir():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", cache, package], check=True
        )
        [wheel] = cache.glob(f"{package}-*.whl")
        zipfile.ZipFile(wheel).extractall(target)
    return target


def scan_seconds(root: Path, jobs: int) -> float:
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "npu_migrate",
            "scan",
            str(root),
            "--format",
            "json",
            "-j",
            str(jobs),
            "--no-cache",
        ],
        capture_output=True,
        check=False,
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "npu-migrate-bench")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    index = RuleIndex(load_rules())
    header = ["package".ljust(13), "files".rjust(6), "lines".rjust(10), "prefilt".rjust(7)]
    print(" ".join([*header, "scan -j1".rjust(9), f"scan -j{args.jobs}".rjust(9), "parse all".rjust(10)]))
    for package in PACKAGES:
        root = unpack(package, args.cache)
        sources = [p.read_bytes() for p in root.rglob("*.py")]
        lines = sum(s.count(b"\n") for s in sources)
        passed = sum(index.may_match(s.decode("latin-1")) for s in sources)
        serial = scan_seconds(root, 1)
        parallel = scan_seconds(root, args.jobs)
        start = time.perf_counter()
        for source in sources:
            with contextlib.suppress(Exception):  # a file libcst cannot parse costs what it costs
                cst.parse_module(source)
        floor = time.perf_counter() - start
        row = [package.ljust(13), f"{len(sources):>6}", f"{lines:>10,}", f"{passed:>7}"]
        print(" ".join([*row, f"{serial:>8.1f}s", f"{parallel:>8.1f}s", f"{floor:>9.1f}s"]))


if __name__ == "__main__":
    main()
