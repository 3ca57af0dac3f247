"""Cheap name resolution: one walk over a file's import statements builds a table of local
names to qualified names; dotted expressions are then resolved by looking up their head.

This replaces libcst's QualifiedNameProvider (about 8x the cost of the parse itself). Imports are
treated as file-global, which is how nearly all model code uses them; shadowing a module name
with a local variable is not tracked.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import libcst as cst

if TYPE_CHECKING:
    from npu_migrate.rules.schema import Rule

_BLOCKS = (
    cst.IndentedBlock,
    cst.Else,
    cst.ExceptHandler,
    cst.ExceptStarHandler,
    cst.Finally,
    cst.If,
    cst.MatchCase,
    cst.SimpleStatementSuite,
)


def dotted_parts(node: cst.BaseExpression) -> list[str] | None:
    """['torch', 'cuda', 'amp'] for `torch.cuda.amp`; None when it is not a plain dotted name."""
    parts: list[str] = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name):
        return None
    parts.append(node.value)
    parts.reverse()
    return parts


def module_name(node: cst.Attribute | cst.Name | None) -> str:
    if node is None:
        return ""
    parts = dotted_parts(node)
    return ".".join(parts) if parts else ""


def name_matches(qualified: str | None, patterns: list[str]) -> bool:
    """Whether a qualified name is one of `patterns`: exact names, or 'a.b.*' for anything
    strictly under a.b (the same reading the rule index uses)."""
    if qualified is None:
        return False
    return any(qualified == p or (p.endswith(".*") and qualified.startswith(p[:-1])) for p in patterns)


def small_statements(body: Sequence[cst.BaseStatement]) -> Iterator[cst.BaseSmallStatement]:
    """Every simple statement in a body, nested blocks included, without visiting expressions."""
    for statement in body:
        yield from _walk(statement)


def _walk(node: cst.CSTNode) -> Iterator[cst.BaseSmallStatement]:
    if isinstance(node, cst.SimpleStatementLine | cst.SimpleStatementSuite):
        yield from node.body
    elif isinstance(node, cst.IndentedBlock):
        yield from small_statements(node.body)
    else:
        for child in node.children:
            if isinstance(child, _BLOCKS):
                yield from _walk(child)


@dataclass
class ImportTable:
    """Local name -> qualified name, for every name a file binds by import."""

    bindings: dict[str, str] = field(default_factory=dict)
    imports: list[cst.Import | cst.ImportFrom] = field(default_factory=list)

    @classmethod
    def of(cls, module: cst.Module) -> ImportTable:
        table = cls()
        for statement in small_statements(module.body):
            if isinstance(statement, cst.Import | cst.ImportFrom):
                table.add(statement)
        return table

    def add(self, statement: cst.Import | cst.ImportFrom) -> None:
        self.imports.append(statement)
        if isinstance(statement, cst.Import):
            for alias in statement.names:
                full = module_name(alias.name)
                if alias.asname is not None:
                    self.bindings[alias.asname.name.value] = full  # type: ignore[union-attr]
                else:
                    head = full.split(".")[0]
                    self.bindings.setdefault(head, head)
            return
        if statement.relative or isinstance(statement.names, cst.ImportStar):
            return
        base = module_name(statement.module)
        for alias in statement.names:
            local = alias.evaluated_alias or alias.evaluated_name
            self.bindings[local] = f"{base}.{alias.evaluated_name}"

    def qualify(self, parts: list[str]) -> str | None:
        """The qualified name of a dotted expression, or None if its head is not imported."""
        target = self.bindings.get(parts[0])
        if target is None:
            return None
        return ".".join([target, *parts[1:]])

    def spell(self, qualified: str) -> tuple[str, str | None]:
        """How this file can write `qualified` (through its own aliases where it can), and the
        module to import when it cannot."""
        spellings = [
            local + qualified[len(target) :]
            for local, target in self.bindings.items()
            if qualified == target or qualified.startswith(target + ".")
        ]
        if spellings:
            return min(spellings, key=len), None
        return qualified, qualified.split(".")[0]

    def binds_module(self, name: str) -> bool:
        return self.bindings.get(name) == name


@dataclass
class NameTable:
    """Rules by qualified-name pattern: 'a.b.c' exactly, or 'a.b.*' for anything strictly under
    a.b. A lookup yields each rule with its specificity (exact names beat prefixes, longer
    beats shorter), the order in which rule precedence ranks them."""

    exact: dict[str, list[Rule]] = field(default_factory=lambda: defaultdict(list))
    under: dict[str, list[Rule]] = field(default_factory=lambda: defaultdict(list))

    def add(self, pattern: str, rule: Rule) -> None:
        if pattern.endswith(".*"):
            self.under[pattern[:-2]].append(rule)
        else:
            self.exact[pattern].append(rule)

    def rules_for(self, qualified: str, whole: bool = False) -> list[tuple[Rule, int]]:
        """Every rule for exactly `qualified` or (unless `whole`) for one of its prefixes, with
        its specificity, most specific first."""
        parts = qualified.split(".")
        found: list[tuple[Rule, int]] = []
        for size in range(len(parts), 0, -1):
            prefix = ".".join(parts[:size]) if size < len(parts) else qualified
            if size == len(parts) or not whole:
                found += [(rule, 2 * size + 1) for rule in self.exact.get(prefix, ())]
            if size < len(parts):
                found += [(rule, 2 * size) for rule in self.under.get(prefix, ())]
        return found
