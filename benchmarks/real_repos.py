"""scan and apply on whole real repositories, as a user checks them out: no tool error (exit 2),
no file near the per-file time limit, and every file apply rewrites still accepted by the tool
that reads it (Python's parser, bash -n, the JSON, YAML and TOML parsers) where it was before;
no file left unread ("not a script bash can parse", "not YAML or JSON") that such a parser accepts.

    python benchmarks/real_repos.py [--mirrors DIR] [--only NAME ...] [--jobs N]

Each repository is a bare git mirror (the library's `fetch` brings them to /work/.mirror); it is
cloned into a temporary folder, so its .gitignore and tracked files are what a user has. Per
repository it prints: files read, the scan's exit code, wall time and the peak memory of its
process tree, the errors and unread files it reports, then apply --unsafe's exit code and the
rewritten files a parser now refuses. The slowest file is timed in this process (the engine on
one file, every fix enabled) against the baseline of Python's own parser on the same file."""

from __future__ import annotations

import argparse
import ast
import glob
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import tomllib
import yaml

from npu_migrate.discover import discover
from npu_migrate.engine.index import RuleIndex
from npu_migrate.pipeline import migrate_file
from npu_migrate.rules.load import load_rules
from npu_migrate.rules.testing import ALL_FIXES
from tests.sources import BOWDPR, MAMBA_TRAINING, MODELZOO_PORTS

SLOW_S = 10.0  # a tenth of the per-file limit: a file this slow is a file that may one day hit it


def git(tree: Path, *arguments: str, given: str | None = None) -> str:
    return subprocess.run(
        ["git", "-C", str(tree), *arguments], input=given, capture_output=True, text=True, check=True
    ).stdout


def clone(mirror: Path, into: Path) -> tuple[Path, list[str]]:
    """A checkout of the mirror's HEAD, and the files it could not hold: a fetched mirror may
    lack its largest blobs, which are checked out as absent (sparsely) rather than failing."""
    target = into / mirror.parent.name
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(mirror), str(target)], check=True)
    listed = [line.split("\t", 1) for line in git(target, "ls-tree", "-r", "-z", "HEAD").split("\0") if line]
    entries = [(meta, path) for meta, path in listed if meta.split()[1] == "blob"]  # not submodules
    blobs = [meta.split()[2] for meta, _ in entries]
    states = git(target, "cat-file", "--batch-check", given="\n".join(blobs) + "\n").splitlines()
    absent = [path for (_, path), state in zip(entries, states, strict=True) if state.endswith(" missing")]
    if absent:
        patterns = ["/*", *("!/" + glob.escape(path) for path in absent)]
        git(target, "sparse-checkout", "set", "--no-cone", "--stdin", given="\n".join(patterns) + "\n")
    git(target, "checkout", "-q", "HEAD")
    return target, absent


def watched(command: list[str]) -> tuple[int, float, float, str]:
    """(exit code, seconds, peak MiB of the process and its children, stdout)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.DEVNULL)
        root, peak = psutil.Process(process.pid), 0
        while process.poll() is None:
            try:
                tree = [root, *root.children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in tree))
            except psutil.Error:
                pass
            time.sleep(0.05)
        out.seek(0)
        return process.returncode, time.perf_counter() - start, peak / 2**20, out.read().decode()


def cli(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "npu_migrate", *arguments]


PARSERS: dict[str, Callable[[Path], object]] = {
    ".py": lambda p: ast.parse(p.read_bytes()),
    ".json": lambda p: json.loads(p.read_bytes()),
    ".ipynb": lambda p: json.loads(p.read_bytes()),
    ".yaml": lambda p: list(yaml.safe_load_all(p.read_bytes())),
    ".yml": lambda p: list(yaml.safe_load_all(p.read_bytes())),
    ".toml": lambda p: tomllib.loads(p.read_text()),
    ".sh": lambda p: subprocess.run(["bash", "-n", str(p)], check=True, capture_output=True),
}


def parses(path: Path) -> bool:
    parse = PARSERS.get(path.suffix)
    try:
        parse and parse(path)
    except Exception:
        return False
    return True


def broken_by_apply(tree: Path) -> tuple[int, list[str]]:
    """(files apply changed, those a parser accepted before and refuses now)."""
    changed = [name for name in git(tree, "diff", "--name-only", "-z").split("\0") if name]
    broken = []
    for name in changed:
        now = tree / name
        before = subprocess.run(
            ["git", "-C", str(tree), "show", f"HEAD:{name}"], capture_output=True, check=True
        )
        with tempfile.TemporaryDirectory() as scratch:
            was = Path(scratch) / now.name
            was.write_bytes(before.stdout)
            if parses(was) and not parses(now):
                broken.append(name)
    return len(changed), broken


def slowest_file(tree: Path, index: RuleIndex) -> tuple[str, float, float]:
    """(file, the engine's seconds on it, Python's parser's seconds on it) for the slowest file."""
    worst = ("", 0.0, 0.0)
    for file in discover([tree]):
        if file.data is None:
            continue
        start = time.perf_counter()
        migrate_file(file, index, ALL_FIXES)
        took = time.perf_counter() - start
        if took > worst[1]:
            start = time.perf_counter()
            try:
                ast.parse(file.data)
            except (SyntaxError, ValueError):  # not Python: no baseline
                start = float("nan")
            worst = (str(file.path.relative_to(tree)), took, time.perf_counter() - start)
    return worst


def mirrors_asked() -> tuple[list[Path], argparse.Namespace]:
    """The bare mirrors the command line names (--mirrors DIR, --only NAME ...), and its options."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--mirrors", type=Path, default=Path("/work/.mirror"))
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--jobs", default="2")
    args = parser.parse_args()
    pinned = {s.repo.replace("/", "+") for s in (MODELZOO_PORTS, BOWDPR, MAMBA_TRAINING)}  # at their pins
    found = [p for p in args.mirrors.iterdir() if (p / "repo" / "HEAD").is_file() and p.name not in pinned]
    mirrors = sorted(p / "repo" for p in found)
    return [m for m in mirrors if not args.only or m.parent.name in args.only], args


def main() -> None:
    mirrors, args = mirrors_asked()
    index = RuleIndex(load_rules())
    columns = "repository files scan(rc,s,MiB) errors unread apply(rc,changed) broken slowest(s,ast s)"
    print(columns)
    failures = 0
    for mirror in mirrors:
        with tempfile.TemporaryDirectory() as scratch:
            tree, absent = clone(mirror, Path(scratch))
            rc, seconds, mib, out = watched(
                cli("scan", str(tree), "--format", "json", "-j", args.jobs, "--no-cache")
            )
            summary = json.loads(out)["summary"] if out.strip() else {}
            errors, unread = summary.get("errors", []), summary.get("not_read", [])
            applied, _, _, _ = watched(
                cli("apply", str(tree), "--unsafe", "-j", args.jobs, "--no-change-list")
            )
            changed, broken = broken_by_apply(tree)
            git(tree, "checkout", "-q", ".")
            name, slow, floor = slowest_file(tree, index)
            refused = [
                u["file"] for u in unread if u["file"].endswith(tuple(PARSERS)) and parses(Path(u["file"]))
            ]
        failures += rc == 2 or applied == 2 or bool(broken) or bool(refused) or slow > SLOW_S
        print(
            f"{mirror.parent.name} {summary.get('files', 0)} ({rc},{seconds:.1f},{mib:.0f}) {len(errors)} "
            f"{len(unread)} ({applied},{changed}) {len(broken)} {name}({slow:.2f},{floor:.3f})",
            flush=True,
        )
        if absent:
            print(f"    {len(absent)} file(s) absent from the mirror, not checked out: {absent[:3]}")
        for problem in [*errors, *unread, *broken]:
            print(f"    {problem}")
        for file in refused:
            print(f"    left unread, yet its own parser accepts it: {file}")
    print(
        f"{len(mirrors)} repositories, {failures} with a tool error, a broken file, a parseable file "
        "left unread or a slow file"
    )


if __name__ == "__main__":
    main()
