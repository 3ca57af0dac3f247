"""Many files through the engine: one outcome per file, in worker processes when there are
enough files to pay for them."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor

from npu_migrate.engine.index import RuleIndex
from npu_migrate.engine.source import migrate_source
from npu_migrate.model import FileOutcome, FileResult, SourceFile
from npu_migrate.rules.base import Applicability
from npu_migrate.rules.schema import Rule

PARALLEL_FROM = 32  # fewer files than this are not worth starting worker processes for


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def run_rules(
    files: list[SourceFile],
    rules: Sequence[Rule],
    enabled: frozenset[Applicability],
    advance: Callable[[], None] = lambda: None,
    jobs: int = 1,
) -> list[FileOutcome]:
    results: list[FileResult] = []
    if jobs <= 1 or len(files) < PARALLEL_FROM:
        index = RuleIndex(rules)
        for file in files:
            results.append(_migrate(file, index, enabled))
            advance()
    else:
        chunk = max(1, min(16, len(files) // (jobs * 4)))
        with ProcessPoolExecutor(jobs, initializer=_start_worker, initargs=(rules, enabled)) as pool:
            for result in pool.map(_migrate_in_worker, files, chunksize=chunk):
                results.append(result)
                advance()
    return [FileOutcome(file, result) for file, result in zip(files, results, strict=True)]


def _migrate(file: SourceFile, index: RuleIndex, enabled: frozenset[Applicability]) -> FileResult:
    """One file's result; a failure inside the engine is that file's error, not the run's."""
    if file.data is None:
        return FileResult()
    try:
        return migrate_source(file.data, index, enabled)
    except Exception as exc:  # an engine bug must not cost the user the other files
        return FileResult(error=f"internal error, file left untouched: {type(exc).__name__}: {exc}")


_worker: tuple[RuleIndex, frozenset[Applicability]] | None = None


def _start_worker(rules: Sequence[Rule], enabled: frozenset[Applicability]) -> None:
    global _worker
    _worker = (RuleIndex(rules), enabled)


def _migrate_in_worker(file: SourceFile) -> FileResult:
    assert _worker is not None
    return _migrate(file, *_worker)
