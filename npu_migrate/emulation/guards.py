"""The run-time guards of guarded fused swaps (`why_not_npu_*`, written by rules/fused.yaml),
counted as the program runs: per guarded site (`path/in/tree.py:line`, the line that asks the
guard), how often the fused operator ran ("fused") and, for each reason the guard gave, how often
the original code ran instead. A swap that never takes its fused path is then visible where a run
that merely succeeds would read as proof of it.

A swap looks its guard up in its module's globals as it runs, so counting replaces the guard
there: `verify` does it for the modules its entry loaded; `run --emulate` for every module of the
tree as it is loaded, in every process the run starts (the stand-in's `sitecustomize` calls
`count_this_process`), each process leaving its counts in a folder the run then sums up. A
script's own guards (`python model.py` defining and calling them in one go) are not counted."""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.machinery
import json
import os
import sys
import types
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

PREFIX = "why_not_npu_"
FOLDER_VARIABLE = "NPU_MIGRATE_GUARD_COUNTS"  # where each process of a run leaves its counts
ROOT_VARIABLE = "NPU_MIGRATE_GUARD_ROOT"  # the tree whose modules' guards are counted


class GuardCounts:
    """The counts of one process, for the guards of the modules inside `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sites: dict[str, Counter[str]] = {}
        self.counting = True
        self._replaced: list[tuple[types.ModuleType, str, Callable[..., Any]]] = []
        self._wrappers: set[int] = set()
        self._files: dict[str, str] = {}  # a swap's file -> its name in the report

    def inside(self, file: str | None) -> bool:
        return bool(file) and Path(file).resolve().is_relative_to(self.root)  # type: ignore[arg-type]

    def watch(self, module: types.ModuleType) -> None:
        """Count the guards a module of the tree defines."""
        if not self.inside(getattr(module, "__file__", None)):
            return
        for name, guard in list(vars(module).items()):
            if name.startswith(PREFIX) and callable(guard) and id(guard) not in self._wrappers:
                counted = self._counted(guard)
                self._wrappers.add(id(counted))
                self._replaced.append((module, name, guard))
                setattr(module, name, counted)

    def watch_loaded(self) -> None:
        """Count the guards of the tree's modules loaded so far."""
        for module in list(sys.modules.values()):
            if isinstance(module, types.ModuleType):
                self.watch(module)

    def restore(self) -> None:
        """Put the tree's guards back."""
        for module, name, guard in self._replaced:
            setattr(module, name, guard)
        self._replaced.clear()

    def _where(self, file: str) -> str:
        """A swap's file as the report names it (inside the tree, from its root); worked out once
        a file, since a guard asks at every call of its swap."""
        where = self._files.get(file)
        if where is None:
            path = Path(file).resolve()
            where = path.relative_to(self.root).as_posix() if path.is_relative_to(self.root) else path.name
            self._files[file] = where
        return where

    def _counted(self, guard: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            why = guard(*args, **kwargs)
            if self.counting:
                frame = sys._getframe(1)  # the swap: the guard is asked where the fused code is
                outcomes = self.sites.setdefault(
                    f"{self._where(frame.f_code.co_filename)}:{frame.f_lineno}", Counter()
                )
                outcomes["fused" if why is None else str(why)] += 1
            return why

        return counted


class _WatchOnLoad(importlib.abc.MetaPathFinder):
    """Finds modules as the finders after it do, and has a source module of the tree counted
    once it has run (its loader is its own: one per module)."""

    def __init__(self, counts: GuardCounts) -> None:
        self.counts = counts

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        spec = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is not self and find is not None and (spec := find(fullname, path, target)):
                break
        if spec is None:
            return None
        loader = spec.loader
        if isinstance(loader, importlib.machinery.SourceFileLoader) and self.counts.inside(spec.origin):
            run = loader.exec_module

            def exec_module(module: types.ModuleType) -> None:
                run(module)
                self.counts.watch(module)

            loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def watch_imports(counts: GuardCounts) -> None:
    """Count the guards of each module of the tree this process loads from now on."""
    sys.meta_path.insert(0, _WatchOnLoad(counts))


def count_this_process() -> None:
    """Where a run asked for it (its variables), count the tree's guards in this process and
    leave the counts in the run's folder at exit."""
    folder, root = os.environ.get(FOLDER_VARIABLE), os.environ.get(ROOT_VARIABLE)
    if folder and root:
        counts = GuardCounts(Path(root).resolve())
        watch_imports(counts)
        atexit.register(_leave, counts, Path(folder))


def _leave(counts: GuardCounts, folder: Path) -> None:
    if counts.sites and folder.is_dir():
        sites = {site: dict(outcomes) for site, outcomes in counts.sites.items()}
        (folder / f"{os.getpid()}.json").write_text(json.dumps(sites), encoding="utf-8")


def summed(folder: Path) -> dict[str, Counter[str]]:
    """The counts every process of a run left, summed per site."""
    total: dict[str, Counter[str]] = {}
    for file in sorted(folder.glob("*.json")):
        try:
            sites = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a process cut off as it wrote
        for site, outcomes in sites.items():
            total.setdefault(site, Counter()).update(outcomes)
    return total


def described(sites: dict[str, Counter[str]]) -> Iterator[str]:
    """One line per guarded site: how often the fused path ran, and why the original ran."""
    for site, outcomes in sorted(sites.items()):
        fused = outcomes.get("fused", 0)
        others = [(why, n) for why, n in outcomes.most_common() if why != "fused"]
        originals = "".join(f"; the original {n} ({why})" for why, n in others)
        yield f"  {site}: fused {fused}{originals}"
