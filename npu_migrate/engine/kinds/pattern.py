"""`pattern:` rules: code patterns with $NAME metavariables (an expression, a statement or a
whole `def`), matched structurally with dotted names resolved through imports; guards on what
metavariables may bind (plain names, excluded code, the data flow of `assigned`); template
fixes."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, cast

import libcst as cst
from pydantic import AfterValidator, Field

from npu_migrate.engine.kinds.base import Candidate, Kind, LeaveHook, Matcher, VisitHook
from npu_migrate.engine.names import dotted_parts, small_statements
from npu_migrate.engine.patterns import METAVARIABLE, Pattern, code_of, fill
from npu_migrate.engine.regions import Anchors
from npu_migrate.prefilter import Prefilter
from npu_migrate.rules.base import Strict

if TYPE_CHECKING:
    from npu_migrate.rules.schema import Rule


def _parses(value: str) -> str:
    try:
        Pattern.compile(value)
    except Exception as exc:  # libcst's parser errors are multi-line; keep the first line
        raise ValueError(f"not a valid pattern: {str(exc).splitlines()[0]}") from None
    return value


class PatternMatch(Strict):
    pattern: Annotated[str, AfterValidator(_parses)] = Field(
        description="Python expression or statement; $NAME metavariables match any expression."
    )
    simple: list[str] = Field(
        default_factory=list,
        description="Metavariables that must match a plain name or attribute chain (safe to repeat).",
    )
    exclude: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Code a metavariable must not match, e.g. {P: [self]}.",
    )
    assigned: list[Annotated[str, AfterValidator(_parses)]] = Field(
        default_factory=list,
        description="Assignment patterns, one of which must bind the match's names earlier in the "
        "same function, e.g. '$A, $B = $X.chunk(2, dim=-1)': the names are assigned only there, "
        "and $X is a plain name not assigned there or after it.",
    )


class PatternMatcher(Matcher):
    kind: PatternKind

    def hooks(self) -> tuple[dict[type, VisitHook], dict[type, LeaveHook]]:
        """A leave hook for each node type a pattern is rooted at."""
        return {}, {node_type: self._leave for node_type in self.kind.by_type}

    def _leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> list[Candidate]:
        candidates = []
        for rule, pattern in self.kind.by_type[type(original)]:
            bindings = pattern.match(updated, self.ctx.table.qualify)
            if bindings is None or not self._guards_hold(cast(PatternMatch, rule.match), bindings):
                continue
            fixed: cst.CSTNode | None = None
            needed: list[str] = []
            if rule.fix and rule.fix.template:
                codes = {name: code_of(node, self.ctx.module) for name, node in bindings.items()}
                fixed, needed = fill(rule.fix.template, codes, self.ctx.table.spell)
                fixed = _framed_like(fixed, updated)
            candidates.append(Candidate(rule, fixed, tuple(needed)))
        return candidates

    def _guards_hold(self, match: PatternMatch, bindings: dict[str, cst.CSTNode]) -> bool:
        """Checks the pattern's guards; `assigned` ones add what they bind to `bindings`."""
        if match.assigned:
            found = self._assignment(match, bindings)
            if found is None:
                return False
            bindings.update(found)
        if not all(
            isinstance(b, cst.BaseExpression) and dotted_parts(b) for b in map(bindings.get, match.simple)
        ):
            return False
        return all(
            code_of(bindings[name], self.ctx.module) not in codes for name, codes in match.exclude.items()
        )

    def _assignment(
        self, match: PatternMatch, bindings: dict[str, cst.CSTNode]
    ) -> dict[str, cst.CSTNode] | None:
        """The bindings of the statement in the enclosing function that assigns the matched names
        as `match.assigned` says, when the data flow makes the rewrite safe: those names are
        assigned nowhere else, and what they were computed from is not assigned there or later."""
        functions = self.ctx.facts.functions
        if not functions or not isinstance(functions[-1].body, cst.IndentedBlock):
            return None
        statements = list(small_statements(list(functions[-1].body.body)))
        assigned = [_assigned_names(s) for s in statements]
        for index, statement in enumerate(statements):
            for source in match.assigned:
                pattern = Pattern.compile(source)
                found = pattern.match(statement, self.ctx.table.qualify, bindings)
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


class PatternKind(Kind[PatternMatch]):
    key = "pattern"
    schema = PatternMatch
    matcher_type = PatternMatcher
    fixes = frozenset({"template"})

    def __init__(self, rules: Sequence[Rule]) -> None:
        super().__init__(rules)
        self.by_type: dict[type[cst.CSTNode], list[tuple[Rule, Pattern]]] = defaultdict(list)
        for rule, match in self.entries:
            pattern = Pattern.compile(match.pattern)
            self.by_type[pattern.root_type].append((rule, pattern))

    @staticmethod
    def bindable(match: PatternMatch) -> set[str]:
        return set(METAVARIABLE.findall(" ".join([match.pattern, *match.assigned])))

    @staticmethod
    def keys(match: PatternMatch) -> set[str]:
        """A call pattern shares the call kind's key; others are keyed by their anchor."""
        return {Pattern.compile(match.pattern).key}

    @classmethod
    def overlaps(cls, a: Rule, b: Rule) -> bool:
        """Two patterns overlap when some code could match both."""
        pattern_a, pattern_b = cast(PatternMatch, a.match), cast(PatternMatch, b.match)
        return Pattern.compile(pattern_a.pattern).unifies(Pattern.compile(pattern_b.pattern))

    def need(self, prefilter: Prefilter) -> None:
        for patterns in self.by_type.values():
            for _, pattern in patterns:
                prefilter.need(frozenset(pattern.words))

    def anchor(self, anchors: Anchors) -> None:
        """A pattern's anchors (see Pattern.anchors); a match of a whole `def`, or one guarded by the
        data flow of its function, needs that whole function."""
        for _, match in self.entries:
            pattern = Pattern.compile(match.pattern)
            anchors.rule(
                *pattern.anchors(), function=bool(match.assigned) or pattern.root_type is cst.FunctionDef
            )


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
