"""Many files through the engine: one outcome per file. A file whose result is in the cache
(same bytes, same rules, same tool, same options) is not looked at again; the rules are loaded
and the engine imported only when some file needs them, and the engine runs in supervised
worker processes (as many as -j, no more than files to do), so that a file that crashes or
stalls a parser costs only that file."""

from __future__ import annotations

import ast
import gc
import hashlib
import importlib
import json
import os
import resource
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from npu_migrate.cache import ResultCache
from npu_migrate.discover import kind_of
from npu_migrate.interrupt import ignore_in_worker, stop_workers
from npu_migrate.model import Applicability, FileOutcome, FileResult, ModulePath, SourceFile

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

    from npu_migrate.engine.index import RuleIndex
    from npu_migrate.rules.schema import Rule
    from npu_migrate.word_holds import WordHold

FILE_SECONDS = 120  # one file's time in the engine before its worker is stopped
MEMORY_SHARE = 3 / 4  # of the machine's memory, for all workers together
# A worker's cyclic garbage collector runs once this many more containers are allocated than
# freed (Python's default, 700, runs it thousands of times a scan: parsers allocate trees
# without cycles, which reference counting frees).
COLLECT_AFTER = 20_000
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
    without: frozenset[str] = frozenset()  # codes of rules left out (verify's bisection)
    select: tuple[str, ...] | None = None  # codes or prefixes reported (None: every rule); config.py
    ignore: tuple[str, ...] = ()  # codes or prefixes never reported nor fixed
    checked_before: bool = False  # this rule set loaded in an earlier run (the result cache says so)

    @cached_property
    def rules(self) -> list[Rule]:
        from npu_migrate.rules.load import load_rules

        loaded = load_rules(self.extra, self.builtin, overlaps_checked=self.checked_before)
        return [rule for rule in loaded if rule.code not in self.without]

    @cached_property
    def index(self) -> RuleIndex:
        """The rules made ready for matching, once a run: the prefilter's cache entry, the reruns
        and the workers that fork from this process share it."""
        from npu_migrate.engine.index import RuleIndex

        return RuleIndex(self.rules, self.silenced)

    @cached_property
    def silenced(self) -> frozenset[str]:
        """Codes of rules the configuration leaves out: they still run, so that no catch-all they
        win over speaks in their place, but their findings are neither reported nor fixed."""
        from npu_migrate.config import selected

        return frozenset(r.code for r in self.rules if not selected(r.code, self.select, self.ignore))

    def fingerprint(self) -> str:
        """What the results depend on besides a file's bytes: this tool's own code and the rules."""
        from npu_migrate.rules.files import builtin_rules_dir, rule_files

        digest = hashlib.sha256()
        for path in rule_files(([builtin_rules_dir()] if self.builtin else []) + list(self.extra)):
            digest.update(str(path.resolve()).encode() + b"\0" + path.read_bytes())
        for path in sorted(PACKAGE.rglob("*.py")):
            digest.update(path.read_bytes())
        digest.update(",".join(sorted(self.without)).encode())
        digest.update(repr((self.select, sorted(self.ignore))).encode())
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
    given, files = files, _with_words_elsewhere(files, source, cache)  # the second, as the engine sees them
    results: dict[int, FileResult] = {}
    keys: dict[int, str] = {}
    for i, file in enumerate(files):
        if file.data is None:
            results[i] = FileResult()
        elif cache is not None:
            keys[i] = _cache_key(cache, file)
            if (hit := _cached(cache, keys[i], file)) is not None:
                results[i] = hit
        if i in results:
            advance()
    todo = [i for i in range(len(files)) if i not in results]
    if todo and cache is not None:
        for i in _passed_by_the_prefilter(files, todo, source, cache):
            results[i] = FileResult()
            cache.put(keys[i], json.dumps(results[i].to_json()).encode())
            advance()
        todo = [i for i in todo if i not in results]
    if todo:
        for i, result in zip(
            todo, _migrate_all([files[i] for i in todo], source, enabled, advance, jobs), strict=True
        ):
            results[i] = result
            if cache is not None and not result.tool_failed:
                cache.put(keys[i], json.dumps(result.to_json()).encode())
    outcomes = _run_facts(
        [FileOutcome(file, results[i]) for i, file in enumerate(files)], source, enabled, cache
    )
    if any(o.result.findings and kind_of(o.file) == "native" for o in outcomes):
        from npu_migrate.handlers.operator_links import link_operators  # (no engine on a warm run)

        outcomes = link_operators(outcomes, source.index)  # custom operators
    return [_as_read(file, outcome.result) for file, outcome in zip(given, outcomes, strict=True)]


def _as_read(file: SourceFile, result: FileResult) -> FileOutcome:
    """The file with its result; one its handler left unread (a notebook in R, which only its
    metadata tells, decided by the handler so that a warm run reads it from the cache) is
    reported as skipped, as discovery's skips are."""
    if result.skipped is None:
        return FileOutcome(file, result)
    return FileOutcome(replace(file, data=None, skipped=result.skipped), FileResult())


def _run_facts(
    outcomes: list[FileOutcome],
    source: RuleSource,
    enabled: frozenset[Applicability],
    cache: ResultCache | None = None,
) -> list[FileOutcome]:
    """The files that what other files of the run decided changes, run again knowing it (in this
    process: they are few, and parsed once already): mocks renamed while other files keep calling
    the mocked names, and values handed on under an attribute name other files keep comparing
    with CUDA (engine.program.run). What they knew is part of their module's key, so a rerun's
    result is cached as a first run's is."""
    python = [o for o in outcomes if o.result.findings and kind_of(o.file) == "python"]
    if not python:
        return outcomes  # nothing found, nothing to tell other files (nor a module to import for it)
    from npu_migrate.engine.program.run import (
        Calls,
        fixed,
        hands_on,
        imported_modules,
        kept_comparisons,
        mocks_renamed,
    )

    mocking = {id(o): (o, names) for o in python if (names := mocks_renamed(o))}
    fixing = {id(o) for o in python if any(fixed(f) for f in o.result.findings)}
    compared = kept_comparisons(python) if fixing else {}
    if not mocking and not compared:
        return outcomes  # (and a warm run loads no rule)
    renames = {r.code for r in source.rules if r.fix is not None and r.fix.rename} if mocking else set()
    calls = Calls.of(python, renames)  # the rules are loaded only where a mock was renamed
    redo: dict[int, ModulePath] = {}
    for outcome in python:
        mocks: dict[str, str] = {}
        if id(outcome) in mocking:
            imported = imported_modules(outcome.file.data or b"")
            keepers = {name: calls.keeper(name, imported) for name in mocking[id(outcome)][1]}
            mocks = {name: where for name, where in keepers.items() if where}
        handed = compared if id(outcome) in fixing and hands_on(outcome.file.data or b"", compared) else {}
        if mocks or handed:
            redo[id(outcome)] = replace(
                outcome.file.module,
                kept_elsewhere=tuple(sorted(mocks.items())),
                compared_elsewhere=tuple(sorted(handed.items())),
            )
    if not redo:
        return outcomes

    def rerun(file: SourceFile) -> FileResult:  # the engine is imported where a rerun is not cached
        if cache is None:
            return migrate_file(file, source.index, enabled)
        key = _cache_key(cache, file)
        if (hit := _cached(cache, key, file)) is not None:
            return hit
        result = migrate_file(file, source.index, enabled)
        if not result.tool_failed:
            cache.put(key, json.dumps(result.to_json()).encode())
        return result

    return [
        FileOutcome(o.file, rerun(replace(o.file, module=redo[id(o)]))) if id(o) in redo else o
        for o in outcomes
    ]


def _with_words_elsewhere(
    files: list[SourceFile], source: RuleSource, cache: ResultCache | None
) -> list[SourceFile]:
    """The files, each Python file that may make a fix held for words another file mentions
    (Rule.hold_in_files_with) knowing those words before its first pass (npu_migrate.word_holds)."""
    holds = _word_holds(source, cache)
    python = [i for i, file in enumerate(files) if file.data is not None and kind_of(file) == "python"]
    if not holds or not python:
        return files
    from npu_migrate.word_holds import words_elsewhere

    known = dict(zip(python, words_elsewhere([files[i] for i in python], holds), strict=True))
    return [known.get(i, file) for i, file in enumerate(files)]


def _word_holds(source: RuleSource, cache: ResultCache | None) -> list[WordHold]:
    """The rule set's holds for words (word_holds.WordHold), kept in the result cache by the
    first run that reads them, so that a warm run loads no rule for them."""
    from npu_migrate.word_holds import WordHold

    key = cache.key(b"the word holds of this salt") if cache is not None else ""
    raw = cache.get(key) if cache is not None else None
    if raw is not None:
        return [WordHold.from_json(hold) for hold in json.loads(raw)]
    from npu_migrate.engine.index import RuleIndex

    holds = [
        WordHold(tuple(rule.hold_in_files_with.words), RuleIndex([rule]).prefilter)
        for rule in source.rules
        if rule.hold_in_files_with is not None
    ]
    if cache is not None:
        cache.put(key, json.dumps([hold.to_json() for hold in holds]).encode())
    return holds


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
    else:
        source.checked_before = True


def _passed_by_the_prefilter(
    files: list[SourceFile], todo: list[int], source: RuleSource, cache: ResultCache
) -> list[int]:
    """The Python files among `todo` that no rule of the set can match, and that hold no
    suppression to report unused: their result is empty, as the engine's would be, without
    loading the rules or the engine. The set's prefilter is kept in the cache by the first run
    that builds it, whose workers test the files themselves."""
    from npu_migrate.engine.suppressions import marked
    from npu_migrate.prefilter import Prefilter, word_counts

    python = [i for i in todo if kind_of(files[i]) == "python" and not marked(files[i].data or b"")]
    if not python:
        return []
    key = cache.key(b"the python prefilter of this salt")
    raw = cache.get(key)
    if raw is None:  # the set's first run: its workers test every file (a test here would be a second)
        cache.put(key, json.dumps(source.index.prefilter.to_json()).encode())
        return []
    prefilter = Prefilter.from_json(json.loads(raw))
    passed = []
    for i in python:
        text = (files[i].data or b"").decode("latin-1")  # as the engine reads its words
        if not prefilter.may_match_module(text, word_counts(text), files[i].module):
            passed.append(i)
    return passed


def salt(source: RuleSource, enabled: frozenset[Applicability]) -> str:
    """The cache salt of a run: results depend on the tool, the rules and the enabled fixes."""
    return source.fingerprint() + "|" + ",".join(sorted(a.value for a in enabled))


def _cache_key(cache: ResultCache, file: SourceFile) -> str:
    """What a file's result depends on: its kind (the same bytes are a shell script's findings
    and a Python file's nothing), its place among packages, and its bytes, each length-fixed
    or ended before the next so that no two files' fields run into each other."""
    where = hashlib.sha256(file.module.key).digest()
    return cache.key(kind_of(file).encode() + b"\0" + where + (file.data or b""))


def _cached(cache: ResultCache, key: str, file: SourceFile) -> FileResult | None:
    """The cached result, or None: an entry from an older layout, or one whose rewrite of a
    Python file or notebook does not parse (the cache's checksum catches a torn write, not an
    entry rewritten with its checksum, and apply must never write code that the engine, which
    only writes what parses, could not have made)."""
    raw = cache.get(key)
    if raw is None:
        return None
    try:
        result = FileResult.from_json(json.loads(raw))
    except (ValueError, KeyError, TypeError):
        return None
    if result.new_source is not None and not _parses(kind_of(file), result.new_source):
        return None
    return result


def _parses(kind: str, data: bytes) -> bool:
    """Whether a rewrite of a file of this kind still reads as one (kinds other than Python and
    notebooks: not checked)."""
    try:
        if kind == "python":
            ast.parse(data)
        elif kind == "notebook":
            json.loads(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def workers(jobs: int, files: int) -> int:
    """How many worker processes a run starts: as asked, but no more than there are files to
    share, or CPUs to run them (`-j 400` on 2 cores started about 90, each with its own copy of
    the rules, to no gain)."""
    return max(1, min(jobs, files, default_jobs()))


def _migrate_all(
    files: list[SourceFile],
    source: RuleSource,
    enabled: frozenset[Applicability],
    advance: Callable[[], None],
    jobs: int,
) -> list[FileResult]:
    """Every file's result, from supervised worker processes: a file that crashes its worker
    (a parser's segfault) or runs past FILE_SECONDS is named in its result, and the rest of the
    run goes on. Biggest files first, so the workers finish together."""
    global _inherited
    rules, silenced = source.rules, source.silenced
    _inherited = source.index if _workers_fork() else None
    todo = deque(sorted(range(len(files)), key=lambda i: -len(files[i].data or b"")))
    results: dict[int, FileResult] = {}
    suspects: list[int] = []  # in flight when a worker crashed: each runs again alone
    while todo or suspects:
        alone = bool(suspects)
        batch = deque([suspects.pop()]) if alone else todo
        width = 1 if alone else workers(jobs, len(batch))
        crashed = _supervise(files, batch, (rules, silenced), enabled, width, results, advance)
        if alone and crashed:
            results[crashed[0]] = FileResult(
                error=f"{INTERNAL_ERROR}: the parser crashed on this file", tool_failed=True
            )
            advance()
        else:
            suspects += crashed
    return [results[i] for i in range(len(files))]


def _supervise(
    files: list[SourceFile],
    batch: deque[int],
    rules: tuple[Sequence[Rule], frozenset[str]],
    enabled: frozenset[Applicability],
    width: int,
    results: dict[int, FileResult],
    advance: Callable[[], None],
) -> list[int]:
    """Run the batch on `width` workers, at most one file each at a time, until it is done, a
    file runs too long (its result says so; the pool is replaced), or a worker dies: then the
    files in flight are returned, their workers stopped."""
    # multiprocessing is imported here, by a run that has files to look at: a run whose results
    # are all cached (or a command that runs nothing) does not pay for it
    from concurrent.futures import ProcessPoolExecutor

    memory = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * MEMORY_SHARE / width)
    gc.freeze()  # what the workers inherit (the rules): their collections leave its pages shared
    pool = ProcessPoolExecutor(width, initializer=_start_worker, initargs=(rules, enabled, memory))
    try:
        crashed = _share(pool, files, batch, width, results, advance)
    except BaseException:  # Ctrl-C, SIGTERM or SIGHUP (interrupt.Interrupted): the workers ignore it
        stop_workers()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return crashed


def _share(
    pool: ProcessPoolExecutor,
    files: list[SourceFile],
    batch: deque[int],
    width: int,
    results: dict[int, FileResult],
    advance: Callable[[], None],
) -> list[int]:
    """_supervise's work on its pool: the files in flight when a worker died (none otherwise)."""
    from concurrent.futures.process import BrokenProcessPool

    running: dict[Future[FileResult], tuple[int, float]] = {}
    while batch or running:
        while batch and len(running) < width:
            i = batch.popleft()
            running[pool.submit(_migrate_in_worker, files[i])] = (i, time.monotonic())
        finished, _ = wait(running, timeout=1.0, return_when=FIRST_COMPLETED)
        for future in finished:
            i, _ = running.pop(future)
            try:
                results[i] = future.result()
            except BrokenProcessPool:
                stop_workers()  # the others in flight run again alone: none is waited for (a stall)
                return [i, *(j for j, _ in running.values())]
            advance()
        late = [(f, i) for f, (i, start) in running.items() if time.monotonic() - start > FILE_SECONDS]
        if late:
            for future, i in late:
                running.pop(future)
                results[i] = FileResult(
                    error=f"{INTERNAL_ERROR}: stopped after {FILE_SECONDS} s", tool_failed=True
                )
                advance()
            batch.extendleft(i for i, _ in running.values())
            stop_workers()
            return []
    return []


HANDLERS = {  # kind of file (discover.file_kind) -> the module and function that migrate it
    "python": ("npu_migrate.engine.source", "migrate_source"),
    "notebook": ("npu_migrate.handlers.notebook", "migrate_notebook"),
    "shell": ("npu_migrate.handlers.shell", "migrate_shell"),
    "requirements": ("npu_migrate.handlers.dependencies", "migrate_requirements"),
    "pyproject": ("npu_migrate.handlers.dependencies", "migrate_pyproject"),
    "setup.py": ("npu_migrate.handlers.dependencies", "migrate_setup_py"),
    "setup.cfg": ("npu_migrate.handlers.dependencies", "migrate_setup_cfg"),
    "conda": ("npu_migrate.handlers.dependencies", "migrate_conda"),
    "config": ("npu_migrate.handlers.configs", "migrate_config"),
    "dockerfile": ("npu_migrate.handlers.embedded_shell", "migrate_dockerfile"),
    "makefile": ("npu_migrate.handlers.embedded_shell", "migrate_makefile"),
    "native": ("npu_migrate.handlers.native", "migrate_native"),
}


def handler(kind: str) -> Callable[..., FileResult]:
    """What migrates a kind of file (discover.file_kind), or the rules of a content kind
    (kinds.content_of): `(data, index, enabled, where) -> FileResult`, imported on first use."""
    module, function = HANDLERS[kind]
    return getattr(importlib.import_module(module), function)


def migrate_file(file: SourceFile, index: RuleIndex, enabled: frozenset[Applicability]) -> FileResult:
    """One file's result; a failure inside the engine is that file's error, not the run's."""
    assert file.data is not None
    try:
        return _on_deep_stack(handler(kind_of(file)), file.data, index, enabled, file.module)
    except Exception as exc:  # an engine bug must not cost the user the other files
        return FileResult(
            error=f"{INTERNAL_ERROR}, file left untouched: {type(exc).__name__}: {exc}", tool_failed=True
        )


# libcst walks trees recursively: a valid 500-branch `elif` chain or a 400-term sum needs more
# recursion than a thread's default stack allows. The engine runs on a thread of its own with a
# deep stack and a recursion limit to match.
_STACK_BYTES = 512 * 1024 * 1024
_RECURSION_LIMIT = 50_000
_engine_thread: tuple[int, ThreadPoolExecutor] | None = None  # (the process it belongs to, it)


def _engine() -> ThreadPoolExecutor:
    """This process's engine thread, started on first use (a forked worker inherits none)."""
    global _engine_thread
    if _engine_thread is None or _engine_thread[0] != os.getpid():
        threading.stack_size(_STACK_BYTES)
        thread = ThreadPoolExecutor(1, thread_name_prefix="npu-migrate-engine")
        thread.submit(int).result()  # the thread starts now, with the deep stack
        threading.stack_size(0)
        sys.setrecursionlimit(max(sys.getrecursionlimit(), _RECURSION_LIMIT))
        _engine_thread = (os.getpid(), thread)
    return _engine_thread[1]


def _on_deep_stack(function: Callable[..., FileResult], *args: object) -> FileResult:
    return _engine().submit(function, *args).result()


_worker: tuple[RuleIndex, frozenset[Applicability]] | None = None
# The parent's rule index, which a worker forked from it inherits instead of building its own.
_inherited: RuleIndex | None = None


def _workers_fork() -> bool:
    import multiprocessing

    return multiprocessing.get_start_method() == "fork"


def _start_worker(
    rules: tuple[Sequence[Rule], frozenset[str]], enabled: frozenset[Applicability], memory: int
) -> None:
    """A worker: its rule index (the parent's, where it forks), its engine thread, and a cap on
    the memory it may take on top of that, its share of MEMORY_SHARE of the machine's (a huge
    file fails alone, as a MemoryError or a crash the supervisor names, instead of taking the
    machine's memory)."""
    from npu_migrate.engine.index import RuleIndex

    global _worker
    ignore_in_worker()
    index = _inherited
    if index is None:  # not forked: no collection need walk the rules it builds
        index = RuleIndex(*rules)
        gc.freeze()
    _worker = (index, enabled)
    gc.set_threshold(COLLECT_AFTER, 20, 20)
    _engine()  # its stack is reserved (and counted as data) before the cap
    held = _data_bytes()
    if held is None:
        return
    hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
    if hard == resource.RLIM_INFINITY or hard > held + memory:
        resource.setrlimit(resource.RLIMIT_DATA, (held + memory, hard))


def _data_bytes() -> int | None:
    """The size of this process's data, as RLIMIT_DATA counts it (Linux; None elsewhere)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    sizes = [line.split()[1] for line in status.splitlines() if line.startswith("VmData:")]
    return int(sizes[0]) * 1024 if sizes else None


def _migrate_in_worker(file: SourceFile) -> FileResult:
    assert _worker is not None
    return migrate_file(file, *_worker)
