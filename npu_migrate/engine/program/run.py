"""What the files of one run decide for each other, read from their results after the per-file
pass: the names some file keeps calling (a rename the run does not make there: a dual-path file,
a guard hold), so that a test's mock of that name is not renamed away from the code it stands in
for (mmengine's test mocks `torch.cuda.max_memory_allocated`, which its device utilities, keeping
an NPU path beside CUDA, still call), and is renamed where the code it imports renames it."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from npu_migrate.model import FileOutcome

_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_QUOTED = re.compile(rf"[rRuU]?(['\"])(?P<name>{_DOTTED.pattern})\1")


@dataclass
class Calls:
    """Per dotted name a rename rule matched: where the run keeps it (module -> `file:line`) and
    the modules where it renames it."""

    kept: dict[str, dict[str, str]] = field(default_factory=dict)
    renamed: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, outcomes: Iterable[FileOutcome], renaming: Collection[str]) -> Calls:
        calls = cls()
        for outcome in outcomes:
            module = module_name(outcome)
            for finding in outcome.result.findings:
                if finding.rule.code not in renaming or not _DOTTED.fullmatch(finding.code):
                    continue
                if finding.held is not None or finding.replacement is None:
                    calls.kept.setdefault(finding.code, {}).setdefault(
                        module, f"{outcome.file.display}:{finding.line}"
                    )
                else:
                    calls.renamed.setdefault(finding.code, set()).add(module)
        return calls

    def keeper(self, name: str, imported: list[str]) -> str | None:
        """Where the code a mock of `name` stands in for keeps calling it, or None where it renames
        it: decided by the modules the mocking file imports (those it names, then those under
        them), else by whether any file of the run keeps it."""
        kept, renamed = self.kept.get(name, {}), self.renamed.get(name, set())
        for reached in (_exactly(imported), _under(imported)):
            keeps = [where for module, where in kept.items() if reached(module)]
            if keeps:
                return keeps[0]
            if any(reached(module) for module in renamed):
                return None
        return next(iter(kept.values()), None)


def module_name(outcome: FileOutcome) -> str:
    """The module a file is (a file outside any package: its stem, as its neighbours import it)."""
    return outcome.file.module.name or outcome.file.path.stem


def imported_modules(source: bytes) -> list[str]:
    """The modules a file imports (`import a.b`, `from a.b import c`: a.b), absolute ones only."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return []
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append(node.module)
    return found


def mocks_renamed(outcome: FileOutcome) -> list[str]:
    """The mock targets (quoted dotted names) the run renames in this file (or, in a scan, would)."""
    return [
        quoted.group("name")
        for f in outcome.result.findings
        if f.replacement is not None and f.held is None and (quoted := _QUOTED.fullmatch(f.code))
    ]


def _exactly(imported: list[str]) -> Callable[[str], bool]:
    return lambda module: module in imported


def _under(imported: list[str]) -> Callable[[str], bool]:
    return lambda module: any(module.startswith(name + ".") for name in imported)
