"""Everything the one pass knows about one file: its tree, import table and import plan, the
fixes enabled for the run, what it has matched so far and the imports its fixes need. Match
kinds read and write this object, never each other."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cmp_to_key
from typing import TYPE_CHECKING

import libcst as cst
from libcst.metadata import CodeRange

from npu_migrate.engine.facts import Facts
from npu_migrate.engine.imports import ImportPlan
from npu_migrate.engine.names import ImportTable
from npu_migrate.model import Applicability, Finding
from npu_migrate.rules.precedence import compare

if TYPE_CHECKING:
    from npu_migrate.engine.kinds.base import Candidate, Fixed


@dataclass(frozen=True)
class Match:
    """A finding before its position is known: positions cost a pass over the whole file, so
    they are computed once, afterwards, and only for files that have matches."""

    candidate: Candidate
    node: cst.CSTNode  # in the original tree
    code: str
    replacement: str | None
    applied: bool

    def at(self, positions: Mapping[cst.CSTNode, CodeRange]) -> Finding:
        where = positions[self.node]
        return Finding(
            rule=self.candidate.rule.info,
            line=where.start.line,
            column=where.start.column + 1,
            end_line=where.end.line,
            code=self.code,
            replacement=self.replacement,
            applied=self.applied,
        )


class FileContext:
    def __init__(
        self, module: cst.Module, table: ImportTable, plan: ImportPlan, enabled: frozenset[Applicability]
    ) -> None:
        self.module = module
        self.table = table
        self.plan = plan
        self.enabled = enabled
        self.facts = Facts()
        self.matches: list[Match] = []
        self.overridden: list[str] = []  # codes of catalog rules a user rule beat on some node
        self.needed_imports: list[str] = []
        self.droppable_imports: set[str] = set()
        self.rewritten: cst.Module = module  # the module with the enabled fixes, after the pass

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node).strip()

    def enabled_for(self, candidate: Candidate) -> bool:
        return candidate.fixed is not None and candidate.rule.applicability in self.enabled

    def settle(self, candidates: Sequence[Candidate]) -> list[Candidate]:
        """The winning candidate for each part of a node, best first, by rule precedence (a
        user rule beats the catalog, then declared `supersedes`, then the more specific name);
        catalog rules that lost to a user rule are counted as overridden."""
        by_part: dict[str, list[Candidate]] = {}
        for candidate in candidates:
            by_part.setdefault(candidate.part, []).append(candidate)
        winners = []
        for contenders in by_part.values():
            ranked = sorted(contenders, key=cmp_to_key(compare))
            beaten = next((c for c in ranked if c.rule.builtin), None)  # what would have won
            if not ranked[0].rule.builtin and beaten is not None:
                self.overridden.append(beaten.rule.code)
            winners.append(ranked[0])
        return sorted(winners, key=cmp_to_key(compare))

    def record(self, original: cst.CSTNode, candidate: Candidate, applied: bool) -> None:
        """A match, and for an applied fix the imports it needs and the ones it frees."""
        self.matches.append(
            Match(
                candidate=candidate,
                node=original,
                code=self.code(original),
                replacement=_code_of_fixed(self.module, candidate.fixed),
                applied=applied,
            )
        )
        if not applied:
            return
        fix = candidate.rule.fix
        for name in [*(fix.add_import if fix else []), *candidate.imports]:
            if name not in self.needed_imports:
                self.needed_imports.append(name)
        self.droppable_imports.update(fix.drop_unused_imports if fix else [])


def _code_of_fixed(module: cst.Module, fixed: Fixed | None) -> str | None:
    if isinstance(fixed, cst.FlattenSentinel):
        return "; ".join(module.code_for_node(n).strip() for n in fixed.nodes)
    return None if fixed is None else module.code_for_node(fixed).strip()
