"""The pattern part of the rewriter: code patterns with metavariables, their guards (plain
names, excluded code, the data flow of `assigned`), and template fixes."""

from __future__ import annotations

import libcst as cst

from npu_migrate.names import dotted_parts, small_statements
from npu_migrate.patterns import Pattern, code_of, fill
from npu_migrate.ruleset import PatternMatch


def _assigned_names(statement: cst.CSTNode) -> set[str]:
    """Plain names a small statement assigns to."""
    targets: list[cst.BaseExpression] = []
    if isinstance(statement, cst.Assign):
        targets = [t.target for t in statement.targets]
    elif isinstance(statement, cst.AnnAssign | cst.AugAssign):
        targets = [statement.target]
    names: set[str] = set()
    for target in targets:
        if isinstance(target, cst.Name):
            names.add(target.value)
        elif isinstance(target, cst.Tuple | cst.List):
            names.update(e.value.value for e in target.elements if isinstance(e.value, cst.Name))
    return names


def _framed_like(fixed: cst.CSTNode, matched: cst.CSTNode) -> cst.CSTNode:
    """The fixed node keeps the matched node's parentheses, or its comment and blank lines."""
    if isinstance(matched, cst.BaseExpression) and isinstance(fixed, cst.BaseExpression):
        return fixed.with_changes(lpar=matched.lpar, rpar=matched.rpar)
    if isinstance(matched, cst.BaseCompoundStatement) and isinstance(fixed, cst.BaseCompoundStatement):
        return fixed.with_changes(leading_lines=matched.leading_lines)
    return fixed


class PatternRules(cst.CSTTransformer):
    """Mixin of the Rewriter: code patterns, checked as each node is left."""

    def _guards_hold(self, match: PatternMatch, bindings: dict[str, cst.CSTNode]) -> bool:
        """Checks the pattern's guards; `assigned` ones add what they bind to `bindings`."""
        if match.assigned:
            found = self._assignment(match, bindings)
            if found is None:
                return False
            bindings.update(found)
        if not all(dotted_parts(bindings[name]) for name in match.simple):
            return False
        return all(code_of(bindings[name], self.module) not in codes for name, codes in match.exclude.items())

    def _assignment(
        self, match: PatternMatch, bindings: dict[str, cst.CSTNode]
    ) -> dict[str, cst.CSTNode] | None:
        """The bindings of the statement in the enclosing function that assigns the matched names
        as `match.assigned` says, when the data flow makes the rewrite safe: those names are
        assigned nowhere else, and what they were computed from is not assigned there or later."""
        if not self._functions:
            return None
        statements = list(small_statements(self._functions[-1].body.body))  # type: ignore[union-attr]
        assigned = [_assigned_names(s) for s in statements]
        for index, statement in enumerate(statements):
            for source in match.assigned:
                pattern = Pattern.compile(source)
                found = pattern.match(statement, self.table.qualify, bindings)
                if found is None:
                    continue
                named = {var: node.value for var, node in found.items() if isinstance(node, cst.Name)}
                targets = {named[v] for v in pattern.assigned_metavariables if v in named}
                sources = {name for var, name in named.items() if var not in pattern.assigned_metavariables}
                elsewhere = set().union(*assigned[:index], *assigned[index + 1 :])
                from_here = set().union(*assigned[index:])
                if targets & elsewhere or sources & from_here:
                    return None
                return found
        return None

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):
        result = super().on_leave(original_node, updated_node)
        candidates = self.index.patterns.get(type(original_node))
        if not candidates or type(result) is not type(original_node):
            return result
        for rule, pattern in candidates:
            bindings = pattern.match(result, self.table.qualify)  # type: ignore[arg-type]
            if bindings is None or not self._guards_hold(rule.match, bindings):  # type: ignore[arg-type]
                continue
            fixed, needed = None, []
            if rule.fix and rule.fix.template:
                codes = {name: code_of(node, self.module) for name, node in bindings.items()}
                fixed, needed = fill(rule.fix.template, codes, self.table.spell)
                fixed = _framed_like(fixed, result)
            return self._found(rule, original_node, result, fixed, *needed)
        return result
