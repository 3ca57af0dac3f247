"""The one-pass matcher and fixer: a libcst transformer that knows the match kinds, never the
individual rules. Each node type consults only the rules indexed for it; every match becomes a
Finding, and its fix is applied when the rule's applicability is enabled. This module holds the
core (findings, qualified names, attributes, imports); calls, strings and code patterns are the
mixins in call_rules.py, string_rules.py and pattern_rules.py."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import CodeRange

from npu_migrate.call_rules import CallRules
from npu_migrate.fixes import chain_source, renamed_attribute, replace_expression
from npu_migrate.import_plan import ImportPlan, PlannedImport, import_path, regroup, renamed, renamed_by
from npu_migrate.index import NameHit, RuleIndex
from npu_migrate.names import ImportTable, dotted_parts, module_name
from npu_migrate.pattern_rules import PatternRules
from npu_migrate.ruleset import Applicability, Rule
from npu_migrate.string_rules import StringRules


@dataclass(frozen=True)
class Finding:
    rule: Rule
    line: int
    column: int
    end_line: int
    code: str
    replacement: str | None  # the fixed code; None when the rule is report-only
    applied: bool


@dataclass(frozen=True)
class Match:
    """A finding before its position is known: positions cost a pass over the whole file, so
    they are computed once, afterwards, and only for files that have matches."""

    rule: Rule
    node: cst.CSTNode  # in the original tree
    code: str
    replacement: str | None
    applied: bool

    def at(self, positions: Mapping[cst.CSTNode, CodeRange]) -> Finding:
        where = positions[self.node]
        return Finding(
            rule=self.rule,
            line=where.start.line,
            column=where.start.column + 1,
            end_line=where.end.line,
            code=self.code,
            replacement=self.replacement,
            applied=self.applied,
        )


class Rewriter(CallRules, StringRules, PatternRules):
    """Walks a module once; each node type consults only the rules indexed for it."""

    def __init__(
        self,
        module: cst.Module,
        index: RuleIndex,
        enabled: set[Applicability],
        table: ImportTable,
        plan: ImportPlan,
    ) -> None:
        super().__init__()
        self.module = module
        self.index = index
        self.enabled = enabled
        self.table = table
        self.plan = plan
        self.matches: list[Match] = []
        self._by_node: dict[cst.CSTNode, list[Match]] = {}
        self.needed_imports: list[str] = []
        self._functions: list[cst.FunctionDef] = []
        self.droppable_imports: set[str] = set()
        self._not_references: set[cst.CSTNode] = set()
        self._names: dict[cst.CSTNode, tuple[NameHit, list[str], str]] = {}
        self._strings: dict[cst.CSTNode, Rule] = {}

    # ------------------------------------------------------------ findings

    def _found(
        self,
        rule: Rule,
        original: cst.CSTNode,
        updated: cst.CSTNode,
        fixed: cst.CSTNode | cst.FlattenSentinel | None,
        *extra_imports: str | None,
    ) -> cst.CSTNode:
        """Record a match; return the fixed node when the rule's fix is enabled."""
        code = self.module.code_for_node(original).strip()
        replacement = None
        if isinstance(fixed, cst.FlattenSentinel):
            replacement = "; ".join(self.module.code_for_node(n).strip() for n in fixed.nodes)
        elif fixed is not None:
            replacement = self.module.code_for_node(fixed).strip()
        applied = fixed is not None and rule.applicability in self.enabled
        self._record(Match(rule, original, code, replacement, applied))
        if not applied:
            return updated
        for name in [*(rule.fix.add_import if rule.fix else []), *extra_imports]:
            if name and name not in self.needed_imports:
                self.needed_imports.append(name)
        self.droppable_imports.update(rule.fix.drop_unused_imports if rule.fix else [])
        return fixed  # type: ignore[return-value]

    def _record(self, match: Match) -> None:
        """One finding per node and rule; a rule that can fix a node silences the report-only
        rules that matched it too (the specific rewrite beats the generic "not rewritten")."""
        same_node = [m for m in self._by_node.get(match.node, []) if m.rule.code != match.rule.code]
        if match.replacement is None and any(m.replacement is not None for m in same_node):
            return
        if match.replacement is not None:
            silenced = [m for m in same_node if m.replacement is None]
            self.matches = [m for m in self.matches if m not in silenced]
        self._by_node.setdefault(match.node, []).append(match)
        self.matches.append(match)

    # ------------------------------------------------------------ names that are not references

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._not_references.add(node.keyword)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._not_references.add(node.name)
        self._functions.append(node)

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self._functions.pop()
        return updated

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._not_references.add(node.name)

    def visit_AsName(self, node: cst.AsName) -> None:
        self._not_references.add(node.name)

    def visit_Global(self, node: cst.Global) -> bool:
        return False

    def visit_Nonlocal(self, node: cst.Nonlocal) -> bool:
        return False

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    # ------------------------------------------------------------ qualified names

    def visit_Name(self, node: cst.Name) -> None:
        if node not in self._not_references:
            self._note_chain(node, [node.value])

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._not_references.add(node.attr)
        if node in self._not_references:
            return
        parts = dotted_parts(node)
        if parts is None:
            return
        inner: cst.BaseExpression = node.value
        while isinstance(inner, cst.Attribute):
            self._not_references.add(inner)
            inner = inner.value
        self._not_references.add(inner)
        self._note_chain(node, parts)

    def _note_chain(self, node: cst.CSTNode, parts: list[str]) -> None:
        qualified = self.table.qualify(parts)
        if qualified is None:
            return
        hit = self.index.names.lookup(qualified)
        if hit is not None:
            self._names[node] = (hit, parts, qualified)

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return self._fix_chain(original, updated)

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        result = self._fix_chain(original, updated)
        if result is not updated or not isinstance(updated, cst.Attribute):
            return result
        rules = self.index.attributes.get(updated.attr.value)
        if not rules:
            return updated
        return self._found(rules[0], original, updated, renamed_attribute(rules[0], updated))  # type: ignore[return-value]

    def _fix_chain(self, original: cst.BaseExpression, updated: cst.BaseExpression) -> cst.BaseExpression:
        noted = self._names.get(original)
        if noted is None:
            return updated
        hit, parts, qualified = noted
        fix = hit.rule.fix
        if fix is None or not fix.rename:
            return self._found(hit.rule, original, updated, None)  # type: ignore[return-value]
        new_qualified = renamed(qualified, fix.rename)
        if new_qualified is None:
            return self._found(hit.rule, original, updated, None)  # type: ignore[return-value]
        source, extra = chain_source(parts, new_qualified, self.table, self.plan)
        if source == ".".join(parts):
            return updated  # its import carries the change (and the finding)
        fixed = replace_expression(updated, source)
        return self._found(hit.rule, original, updated, fixed, extra)  # type: ignore[return-value]

    # ------------------------------------------------------------ imports

    def leave_Import(self, original: cst.Import, updated: cst.Import) -> cst.Import:
        names = []
        for alias in updated.names:
            qualified = module_name(alias.name)
            self._report_import(original, qualified)
            hit = self.index.names.lookup(qualified, whole=True)
            if hit is not None:
                new = renamed_by(hit, qualified)
                fixed_alias = alias.with_changes(name=cst.parse_expression(import_path(new))) if new else None
                fixed = (
                    updated.with_changes(names=[fixed_alias.with_changes(comma=cst.MaybeSentinel.DEFAULT)])
                    if fixed_alias
                    else None
                )
                self._found(hit.rule, original, updated, fixed)
                if fixed_alias and hit.rule.applicability in self.enabled:
                    alias = fixed_alias
            names.append(alias)
        return updated.with_changes(names=names)

    def leave_ImportFrom(
        self, original: cst.ImportFrom, updated: cst.ImportFrom
    ) -> cst.ImportFrom | cst.FlattenSentinel[cst.ImportFrom]:
        if updated.relative or isinstance(updated.names, cst.ImportStar):
            if not updated.relative:
                self._report_import(original, module_name(updated.module))
            return updated
        base = module_name(updated.module)
        self._report_import(original, base)
        planned: list[PlannedImport | None] = []
        for alias in updated.names:
            planned.append(self.plan.locals.get(alias.evaluated_alias or alias.evaluated_name))
            hit = self.index.names.lookup(f"{base}.{alias.evaluated_name}", whole=True)
            if planned[-1] is None and hit is not None:
                self._found(hit.rule, original, updated, None)
        rules = list({p.rule.code: p.rule for p in planned if p is not None}.values())
        if not rules:
            return updated
        proposed = regroup(updated, base, planned)
        for rule in rules:
            self._found(rule, original, updated, proposed)
        enabled = [p if p is not None and p.rule.applicability in self.enabled else None for p in planned]
        return regroup(updated, base, enabled)

    def _report_import(self, statement: cst.Import | cst.ImportFrom, module: str) -> None:
        hit = self.index.imports.lookup(module)
        if hit is not None:
            self._found(hit.rule, statement, statement, None)
