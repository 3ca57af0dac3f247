"""Many files through the engine: one outcome per file. A file whose result is in the cache
(same bytes, same rules, same tool, same options) is not looked at again; the rules are loaded
and the engine imported only when some file needs them; worker processes start only when the
files left are enough to pay for them."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from npu_migrate.cache import ResultCache
from npu_migrate.model import Applicability, FileOutcome, FileResult, SourceFile

if TYPE_CHECKING:
    from npu_migrate.engine.index import RuleIndex
    from npu_migrate.rules.schema import Rule

PARALLEL_FROM = 512 * 1024  # bytes of source for the engine: fewer are not worth starting workers for
PACKAGE = Path(__file__).resolve().parent
INTERNAL_ERROR = "internal error"  # an engine bug: never cached, so a fixed tool looks again


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass
class RuleSource:
    """The rules of a run: the catalog plus `extra` rule files, loaded on first use (a run whose
    every file is cached never loads them). Raises RuleError from `rules`."""

    extra: Sequence[Path] = ()
    builtin: bool = True
    _loaded: list[Rule] | None = field(default=None, repr=False)

    @cached_property
    def rules(self) -> list[Rule]:
        from npu_migrate.rules.load import load_rules

        return self._loaded if self._loaded is not None else load_rules(self.extra, self.builtin)

    @classmethod
    def of(cls, rules: Sequence[Rule]) -> RuleSource:
        """Rules already loaded."""
        return cls(_loaded=list(rules))

    def fingerprint(self) -> str:
        """What the results depend on besides a file's bytes: this tool's own code and the rules."""
        digest = hashlib.sha256()
        if self._loaded is not None:
            digest.update(json.dumps([r.model_dump(mode="json") for r in self._loaded]).encode())
        else:
            from npu_migrate.rules.files import builtin_rules_dir, rule_files

            tops = ([builtin_rules_dir()] if self.builtin else []) + list(self.extra)
            for path in rule_files(tops):
                digest.update(str(path.resolve()).encode() + b"\0" + path.read_bytes())
        for path in sorted(PACKAGE.rglob("*.py")):
            digest.update(path.read_bytes())
        return digest.hexdigest()


def run_rules(
    files: list[SourceFile],
    source: RuleSource,
    enabled: frozenset[Applicability],
    advance: Callable[[], None] = lambda: None,
    jobs: int = 1,
    cache: ResultCache | None = None,
) -> list[FileOutcome]:
    _check_rules(source, cache)
    results: dict[int, FileResult] = {}
    keys: dict[int, str] = {}
    for i, file in enumerate(files):
        if file.data is None:
            results[i] = FileResult()
        elif cache is not None:
            keys[i] = cache.key(file.data)
            if (hit := _cached(cache, keys[i])) is not None:
                results[i] = hit
        if i in results:
            advance()
    todo = [i for i in range(len(files)) if i not in results]
    if todo:
        for i, result in zip(
            todo, _migrate_all([files[i] for i in todo], source, enabled, advance, jobs), strict=True
        ):
            results[i] = result
            if cache is not None and not (result.error or "").startswith(INTERNAL_ERROR):
                cache.put(keys[i], json.dumps(result.to_json()).encode())
    return [FileOutcome(file, results[i]) for i, file in enumerate(files)]


def _check_rules(source: RuleSource, cache: ResultCache | None) -> None:
    """Load (so validate) the rules unless this very rule set loaded before: a bad rule file is an
    error even when no file needs the rules, and a warm run does not pay for loading them."""
    if cache is None:
        source.rules  # noqa: B018  (loading is the check: it raises RuleError)
        return
    marker = cache.key(b"the rules of this salt load")
    if cache.get(marker) is None:
        source.rules  # noqa: B018
        cache.put(marker, b"ok")


def salt(source: RuleSource, enabled: frozenset[Applicability]) -> str:
    """The cache salt of a run: results depend on the tool, the rules and the enabled fixes."""
    return source.fingerprint() + "|" + ",".join(sorted(a.value for a in enabled))


def _cached(cache: ResultCache, key: str) -> FileResult | None:
    raw = cache.get(key)
    if raw is None:
        return None
    try:
        return FileResult.from_json(json.loads(raw))
    except (ValueError, KeyError, TypeError):  # an entry from an older layout reads as a miss
        return None


def _migrate_all(
    files: list[SourceFile],
    source: RuleSource,
    enabled: frozenset[Applicability],
    advance: Callable[[], None],
    jobs: int,
) -> list[FileResult]:
    rules = source.rules
    results: list[FileResult] = []
    if jobs <= 1 or sum(len(f.data or b"") for f in files) < PARALLEL_FROM:
        from npu_migrate.engine.index import RuleIndex

        index = RuleIndex(rules)
        for file in files:
            results.append(migrate_file(file, index, enabled))
            advance()
        return results
    # Biggest files first, a few at a time: the workers finish together.
    order = sorted(range(len(files)), key=lambda i: -len(files[i].data or b""))
    done: dict[int, FileResult] = {}
    with ProcessPoolExecutor(jobs, initializer=_start_worker, initargs=(rules, enabled)) as pool:
        for i, result in zip(
            order, pool.map(_migrate_in_worker, [files[i] for i in order], chunksize=2), strict=True
        ):
            done[i] = result
            advance()
    return [done[i] for i in range(len(files))]


def migrate_file(file: SourceFile, index: RuleIndex, enabled: frozenset[Applicability]) -> FileResult:
    """One file's result; a failure inside the engine is that file's error, not the run's."""
    from npu_migrate.engine.source import migrate_source

    assert file.data is not None
    try:
        return _on_deep_stack(migrate_source, file.data, index, enabled)
    except Exception as exc:  # an engine bug must not cost the user the other files
        return FileResult(error=f"{INTERNAL_ERROR}, file left untouched: {type(exc).__name__}: {exc}")


# libcst walks trees recursively: a valid 500-branch `elif` chain or a 400-term sum needs more
# recursion than a thread's default stack allows. The engine runs on a thread of its own with a
# deep stack and a recursion limit to match.
_STACK_BYTES = 512 * 1024 * 1024
_RECURSION_LIMIT = 50_000
_engine_thread: ThreadPoolExecutor | None = None


def _on_deep_stack(function: Callable[..., FileResult], *args: object) -> FileResult:
    global _engine_thread
    if _engine_thread is None:
        threading.stack_size(_STACK_BYTES)
        _engine_thread = ThreadPoolExecutor(1, thread_name_prefix="npu-migrate-engine")
        _engine_thread.submit(int).result()  # the thread starts now, with the deep stack
        threading.stack_size(0)
        sys.setrecursionlimit(max(sys.getrecursionlimit(), _RECURSION_LIMIT))
    return _engine_thread.submit(function, *args).result()


_worker: tuple[RuleIndex, frozenset[Applicability]] | None = None


def _start_worker(rules: Sequence[Rule], enabled: frozenset[Applicability]) -> None:
    from npu_migrate.engine.index import RuleIndex

    global _worker
    _worker = (RuleIndex(rules), enabled)


def _migrate_in_worker(file: SourceFile) -> FileResult:
    assert _worker is not None
    return migrate_file(file, *_worker)
