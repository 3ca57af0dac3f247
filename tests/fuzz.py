"""Fuzzing scan and apply with mutated real files of every kind the tool reads (Python, shell,
notebooks, YAML, JSON, TOML, requirements, setup.cfg, Dockerfiles, Makefiles, CUDA sources):
random truncation, byte flips, deep nesting, odd encodings and line endings, spliced lines and
CUDA tokens. Every case must finish within its time limit, raise nothing, and never produce a
rewrite that its language's own tool refuses (Python's parser, bash -n, json, yaml, tomllib,
configparser) when that tool accepted the input.

    python -m tests.fuzz [--cases 3000] [--seed 1] [--seconds 20] [--tree] [--kind KIND ...]

With --tree the cases are written as one tree and go through the real command line (`scan`,
then `apply --unsafe` in place): it must exit 0, 1 or 2 without a traceback, and every file it
rewrites must parse where its input did. The test suite runs a few hundred cases of each
(tests/test_fuzz.py); run thousands by hand."""

from __future__ import annotations

import argparse
import ast
import configparser
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import tomllib
import yaml

from npu_migrate.discover import file_kind
from npu_migrate.engine.index import RuleIndex
from npu_migrate.model import Applicability, SourceFile
from npu_migrate.pipeline import migrate_file
from npu_migrate.rules.load import load_rules

ROOT = Path(__file__).resolve().parent.parent
ALL_FIXES = frozenset({Applicability.safe, Applicability.unsafe})
TOKENS = [
    b"torch.cuda.synchronize()",
    b".cuda()",
    b'"cuda:0"',
    b"device='cuda'",
    b"F.scaled_dot_product_attention(q, k, v, is_causal=True)",
    b"import torch\n",
    b"from torch.cuda import amp as a\n",
    b"os.environ['CUDA_VISIBLE_DEVICES'] = '0'\n",
    b"\n    ",
    b"(",
    b")",
    b'"""',
    b"\\\n",
    b"#",
    b"\x1b[31m",
    b"\xff\xfe",
    b"\x00",
    b"export CUDA_VISIBLE_DEVICES=0,1\n",
    b"$(",
    b"${",
    b"<<EOF\n",
    b"'",
    b"{",
    b"}",
    b": ",
    b"- ",
    b"&a ",
    b"*a",
    b"[",
    b"]",
    b"\t",
    b"nvidia-smi\n",
    b"torch==2.1.0+cu118\n",
    b"--hash=sha256:aa ",
    b"// npu-migrate: ignore-file\n",
    b"ifdef CUDA_HOME\n",
]


@dataclass(frozen=True)
class Source:
    name: str  # the file's name, which gives its kind (discover.file_kind)
    kind: str
    data: bytes


def corpus(kinds: frozenset[str] | None = None) -> list[Source]:
    """Real GPU training code and its launch scripts, configs and dependency files: the bundled
    projects' files of the kinds asked for (all by default)."""
    found = []
    for path in sorted(ROOT.glob("fixtures/*/src/**/*")):
        data = path.read_bytes() if path.is_file() else b""
        kind = file_kind(path.name, data.split(b"\n", 1)[0]) if path.is_file() else None
        if kind is not None and (kinds is None or kind in kinds):
            found.append(Source(path.name, kind, data))
    return found


def _truncate(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randrange(len(data) + 1)]


def _flip(data: bytes, rng: random.Random) -> bytes:
    raw = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if raw:
            raw[rng.randrange(len(raw))] = rng.randrange(256)
    return bytes(raw)


def _nest(data: bytes, rng: random.Random) -> bytes:
    """A deeply nested line (a valid one in Python and TOML), or the whole file nested."""
    depth = rng.choice([50, 199, 250, 1000, 3000])
    opener, closer = rng.choice(
        [(b"(", b")"), (b"[", b"]"), (b"not ", b""), (b'{"a": ', b"}"), (b"$(", b")")]
    )
    if rng.random() < 0.2:
        return opener * depth + data + closer * depth
    return data + b"\nx = " + opener * depth + b"torch.cuda.synchronize()" + closer * depth + b"\n"


def _encode(data: bytes, rng: random.Random) -> bytes:
    choice = rng.randrange(4)
    if choice == 0:
        return b"# -*- coding: latin-1 -*-\n" + data.decode("utf-8", "replace").encode("latin-1", "replace")
    if choice == 1:
        return b"\xef\xbb\xbf" + data
    if choice == 2:
        return data.replace(b"\n", b"\r")
    return data.replace(b"\n", b"\r\n")


def _splice(data: bytes, rng: random.Random) -> bytes:
    lines = data.splitlines(keepends=True)
    for _ in range(rng.randint(1, 6)):
        at = rng.randrange(len(lines) + 1)
        if rng.random() < 0.5 and lines:
            lines.insert(at, rng.choice(lines))
        else:
            lines.insert(at, rng.choice(TOKENS))
    return b"".join(lines)


MUTATIONS: list[Callable[[bytes, random.Random], bytes]] = [_truncate, _flip, _nest, _encode, _splice]


@dataclass(frozen=True)
class Failure:
    case: int
    mutation: str
    problem: str


class _TooSlow(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _TooSlow


def _bash(data: bytes) -> None:
    subprocess.run(["bash", "-n"], input=data, capture_output=True, check=True)


def _python(data: bytes) -> None:
    compile(data, "<fuzz>", "exec", ast.PyCF_ONLY_AST)


def _setup_cfg(data: bytes) -> None:
    configparser.ConfigParser(interpolation=None).read_string(data.decode())


def _yaml(data: bytes) -> None:
    list(yaml.safe_load_all(data))


PARSERS: dict[str, Callable[[bytes], object]] = {  # by kind, or by suffix for configs
    "python": _python,
    "setup.py": _python,
    "shell": _bash,
    "notebook": json.loads,
    ".json": json.loads,
    ".yaml": _yaml,
    ".yml": _yaml,
    "conda": _yaml,
    "pyproject": lambda data: tomllib.loads(data.decode()),
    ".toml": lambda data: tomllib.loads(data.decode()),
    "setup.cfg": _setup_cfg,
}


def parses(source: Source, data: bytes) -> bool | None:
    """Whether the file's own tool accepts data; None where no tool is at hand (Makefiles: make
    would run their `$(shell ...)`; Dockerfiles, requirements and CUDA sources)."""
    parse = PARSERS.get(source.kind) or PARSERS.get(Path(source.name).suffix)
    if parse is None:
        return None
    try:
        parse(data)
    except (Exception, RecursionError, MemoryError):
        return False
    return True


def _broken(source: Source, before: bytes, after: bytes) -> bool:
    return parses(replace(source, data=before), before) is True and parses(source, after) is False


def cases(count: int, seed: int, kinds: frozenset[str] | None = None) -> Iterator[tuple[int, str, Source]]:
    """(case, mutation, the mutated file) for count cases."""
    rng = random.Random(seed)
    sources = corpus(kinds)
    for case in range(count):
        mutation = rng.choice(MUTATIONS)
        source = rng.choice(sources)
        data = source.data
        for _ in range(rng.randint(1, 2)):
            data = mutation(data, rng)
        yield case, f"{mutation.__name__.strip('_')} {source.name}", replace(source, data=data)


def run(count: int, seed: int, seconds: int, kinds: frozenset[str] | None = None) -> list[Failure]:
    """Run the cases; the failures found."""
    index = RuleIndex(load_rules())
    failures = []
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        for case, mutation, source in cases(count, seed, kinds):
            signal.alarm(seconds)
            try:  # as a run does it: on the engine's thread, a bug caught as the file's error
                name = f"case{case}/{source.name}"
                result = migrate_file(SourceFile(Path(name), name, source.data), index, ALL_FIXES)
            except _TooSlow:
                failures.append(Failure(case, mutation, f"took more than {seconds} s"))
                continue
            except Exception as exc:
                failures.append(Failure(case, mutation, f"{type(exc).__name__}: {exc}"))
                continue
            finally:
                signal.alarm(0)
            if result.tool_failed:
                failures.append(Failure(case, mutation, result.error or ""))
            elif result.new_source is not None and _broken(source, source.data, result.new_source):
                failures.append(Failure(case, mutation, "a rewrite that does not parse"))
    finally:
        signal.signal(signal.SIGALRM, previous)
    return failures


def run_tree(
    count: int, seed: int, folder: Path, seconds: int = 600, kinds: frozenset[str] | None = None
) -> list[Failure]:
    """The cases as files of one tree, through `scan` and `apply --unsafe`; the failures found."""
    written = {}
    for case, _, source in cases(count, seed, kinds):
        path = folder / f"case{case}" / source.name
        path.parent.mkdir(parents=True)
        path.write_bytes(source.data)
        written[path] = source
    env = {**os.environ, "XDG_CACHE_HOME": str(folder.parent / "fuzz-cache")}
    failures = []
    for command in (["scan", str(folder)], ["apply", str(folder), "--unsafe"]):
        done = subprocess.run(
            [sys.executable, "-m", "npu_migrate", *command],
            cwd=folder.parent,
            capture_output=True,
            text=True,
            env=env,
            timeout=seconds,
            check=False,
        )
        if done.returncode not in (0, 1, 2) or "Traceback" in done.stdout + done.stderr:
            failures.append(Failure(-1, command[0], f"exit {done.returncode}: {done.stderr[-2000:]}"))
    for case, (path, source) in enumerate(written.items()):
        after = path.read_bytes()
        if after != source.data and _broken(source, source.data, after):
            failures.append(Failure(case, source.name, "apply wrote a file that does not parse"))
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seconds", type=int, default=20, help="time limit of one case")
    parser.add_argument("--tree", action="store_true", help="as one tree through the command line")
    parser.add_argument("--kind", action="append", help="only files of this kind (python, shell, ...)")
    args = parser.parse_args()
    kinds = frozenset(args.kind) if args.kind else None
    start = time.perf_counter()
    if args.tree:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="npu-migrate-fuzz-") as scratch:
            failures = run_tree(args.cases, args.seed, Path(scratch) / "tree", kinds=kinds)
    else:
        failures = run(args.cases, args.seed, args.seconds, kinds)
    for failure in failures:
        print(f"case {failure.case} ({failure.mutation}): {failure.problem}")
    print(f"{args.cases} cases, {len(failures)} failure(s), {time.perf_counter() - start:.1f} s")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
