"""`pattern:` rules: code patterns with $NAME metavariables (an expression, a statement or a
whole `def`), matched structurally with dotted names resolved through imports; guards on what
metavariables may bind (plain names, excluded code, the data flow of `assigned`, the tensor
body of a function it calls, `defines`); template fixes, with a run-time guard where the rule
has one."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, cast

import libcst as cst
from pydantic import AfterValidator, BeforeValidator, Field, WithJsonSchema, model_validator

from npu_migrate.engine.fixes import filled_guard, framed
from npu_migrate.engine.holds import subtree
from npu_migrate.engine.kinds.base import Candidate, Hoist, Kind, LeaveHook, Matcher, VisitHook
from npu_migrate.engine.kinds.fields import Strict
from npu_migrate.engine.names import dotted_parts, is_docstring, method_of, statement_lines
from npu_migrate.engine.patterns import METAVARIABLE, Pattern, code_of, fill, node_key
from npu_migrate.engine.regions import Anchors
from npu_migrate.prefilter import Prefilter

if TYPE_CHECKING:
    from npu_migrate.rules.schema import Rule


def parses(value: str) -> str:
    try:
        Pattern.compile(value)
    except Exception as exc:  # libcst's parser errors are multi-line; keep the first line
        raise ValueError(f"not a valid pattern: {str(exc).splitlines()[0]}") from None
    return value


def _listed(value: object) -> object:
    return [value] if isinstance(value, str) else value


def _each_parses(values: list[str]) -> list[str]:
    return [parses(value) for value in values]


# One pattern, or a list of spellings: read as a list, each checked to parse (an error names
# the field, not a branch of a union).
Spellings = Annotated[
    list[str],
    BeforeValidator(_listed),
    AfterValidator(_each_parses),
    WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}),
]


class PatternMatch(Strict):
    pattern: Spellings = Field(
        description="Python expression or statement; $NAME metavariables match any expression. A "
        "list: the spellings of one computation (`mean(-1, keepdim=True)`, `mean(dim=-1, "
        "keepdim=True)`), any of which matches, binding the same metavariables."
    )
    simple: list[str] = Field(
        default_factory=list,
        description="Metavariables that must match a plain name or attribute chain (safe to repeat).",
    )
    exclude: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Code a metavariable must not match, e.g. {P: [self]}.",
    )
    assigned: list[Annotated[str, AfterValidator(parses)]] = Field(
        default_factory=list,
        description="Assignment patterns, one of which must bind the match's names earlier in the "
        "same function, e.g. '$A, $B = $X.chunk(2, dim=-1)': the names are assigned only there, "
        "and $X is a plain name not assigned there or after it.",
    )
    defines: dict[str, list[list[Annotated[str, AfterValidator(parses)]]]] = Field(
        default_factory=dict,
        description="Functions the pattern calls by name that the file must define at its top level "
        "(`self.NAME`: a method of the class the match is in) with a body (its docstring aside) of "
        "one of these forms, statement by statement (an `if` statement as a whole), their "
        "metavariables bound within the form: what the call computes is read from its definition "
        "(a `rotate_half` that rotates halves, not pairs; diffusers' GEGLU `gelu` method).",
    )
    hoist: dict[str, str] = Field(
        default_factory=dict,
        description="For a metavariable of `assigned` that matched more than a plain name, the name "
        "to give its value ('{A}_{B}': the code of plain-name metavariables A and B): the fix "
        "puts `name = <its code>` on a line of its own before the assignment, which then reads "
        "the name, so the template can use $X once more without computing it twice.",
    )

    @model_validator(mode="after")
    def _hoist_what_is_assigned(self) -> PatternMatch:
        assigned = set(METAVARIABLE.findall(" ".join(self.assigned)))
        for variable, name in self.hoist.items():
            if variable not in assigned:
                raise ValueError(f"hoist: ${variable} is not a metavariable of `assigned`")
            named = assigned | set(METAVARIABLE.findall(" ".join(self.pattern)))
            try:
                name.format_map(dict.fromkeys(named, "x"))
            except (KeyError, ValueError, IndexError) as exc:
                raise ValueError(f"hoist: {name!r} names an unknown metavariable: {exc}") from None
        return self

    @property
    def patterns(self) -> list[Pattern]:
        return [Pattern.compile(source) for source in self.pattern]


class PatternMatcher(Matcher):
    kind: PatternKind

    def hooks(self) -> tuple[dict[type, VisitHook], dict[type, LeaveHook]]:
        """A leave hook for each node type a pattern is rooted at."""
        return {}, {node_type: self._leave for node_type in self.kind.by_type}

    def _leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> list[Candidate]:
        candidates = []
        keys = {node_key(original), node_key(updated)}
        for rule, pattern in self.kind.by_type[type(original)]:
            if pattern.root_key is not None and pattern.root_key not in keys:
                continue  # its first test fails on both
            match = cast(PatternMatch, rule.match)
            bindings = pattern.match(updated, self.ctx.table.qualify)
            if bindings is None and self.ctx.enabled and not (rule.fix and rule.fix.template):
                # a report reads the code as written: another rule's fix inside it (a rename of
                # `torch.cuda.get_device_properties`) does not make its finding go away (a run
                # that fixes nothing matches the code as written already)
                bindings = pattern.match(original, self.ctx.table.qualify)
            if bindings is None:
                continue
            if rule.fix and rule.fix.guard and self.ctx.facts.kept_by_guard(original, rule.fix.guard):
                continue
            hoists: tuple[Hoist, ...] | None = ()
            if match.assigned:
                assignment = self._assignment(match, bindings)
                hoists = self._hoists(match, bindings, assignment[0]) if assignment else None
            if hoists is None or not self._guards_hold(match, bindings, {h.variable for h in hoists}):
                continue
            fixed: cst.CSTNode | None = None
            needed: list[str] = []
            if rule.fix and rule.fix.template:
                codes = {name: code_of(node, self.ctx.module) for name, node in bindings.items()}
                codes.update({h.variable: h.name for h in hoists})
                fixed, needed = fill(rule.fix.template, codes, self.ctx.table.spell)
                if rule.fix.guard:
                    spell = self.ctx.table.spell
                    fixed, guard_needs = filled_guard(rule.fix.guard, fixed, updated, codes, spell)
                    needed = [*needed, *guard_needs]
                fixed = _framed_like(fixed, updated)
            candidates.append(Candidate(rule, fixed, tuple(needed), hoists=hoists))
        return candidates

    def _guards_hold(self, match: PatternMatch, bindings: dict[str, cst.CSTNode], hoisted: set[str]) -> bool:
        """Checks the pattern's guards (hoisted metavariables count as the plain names they become)."""
        if not all(
            name in hoisted or (isinstance(b, cst.BaseExpression) and dotted_parts(b))
            for name, b in zip(match.simple, map(bindings.get, match.simple), strict=True)
        ):
            return False
        return all(
            code_of(bindings[name], self.ctx.module) not in codes for name, codes in match.exclude.items()
        ) and all(self._defined_as(name, forms) for name, forms in match.defines.items())

    def _defined_as(self, name: str, forms: list[list[str]]) -> bool:
        """Whether the file defines `name` at its top level (`self.NAME`: as a method of the class
        the match is in) with a body of one of `forms`."""
        functions = self.ctx.facts.functions
        if name.startswith("self."):
            found = method_of(self.ctx.module, functions[-1], name[5:]) if functions else None
        else:
            tops = (
                s for s in self.ctx.module.body if isinstance(s, cst.FunctionDef) and s.name.value == name
            )
            found = next(tops, None)
        if found is None or not isinstance(found.body, cst.IndentedBlock):
            return False
        body = list(found.body.body)
        if body and is_docstring(body[0]):
            body = body[1:]
        return any(self._body_is(body, form) for form in forms)

    def _body_is(self, body: list[cst.BaseStatement], form: list[str]) -> bool:
        if len(body) != len(form):
            return False
        bindings: dict[str, cst.CSTNode] | None = {}
        for statement, source in zip(body, form, strict=True):
            if isinstance(statement, cst.SimpleStatementLine):
                if len(statement.body) != 1:
                    return False
                node: cst.CSTNode = statement.body[0]
            else:
                node = statement  # a compound statement, matched whole
            bindings = Pattern.compile(source).match(node, self.ctx.table.qualify, bindings)
            if bindings is None:
                return False
        return True

    def _assignment(
        self, match: PatternMatch, bindings: dict[str, cst.CSTNode]
    ) -> tuple[cst.SimpleStatementLine | cst.SimpleStatementSuite, cst.BaseSmallStatement] | None:
        """The statement in the enclosing function (and its line) that assigns the matched names as
        `match.assigned` says, when the data flow makes the rewrite safe: those names are assigned
        nowhere else, and what they were computed from is not assigned there or later. What it
        binds is added to `bindings`."""
        functions = self.ctx.facts.functions
        if not functions or not isinstance(functions[-1].body, cst.IndentedBlock):
            return None
        lines = list(statement_lines(list(functions[-1].body.body)))
        assigned = [assigned_names(s) for _, s in lines]
        for index, (line, statement) in enumerate(lines):
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
                bindings.update(found)
                return line, statement
        return None

    def _hoists(
        self,
        match: PatternMatch,
        bindings: dict[str, cst.CSTNode],
        line: cst.SimpleStatementLine | cst.SimpleStatementSuite,
    ) -> tuple[Hoist, ...] | None:
        """The hoists `match.hoist` asks for where a metavariable of the assignment on `line`
        matched more than a plain name; None when one cannot be made: the assignment shares its
        line, another fix changes that line, or the name is taken in the function."""
        wanted = [v for v in match.hoist if not dotted_parts(cast(cst.BaseExpression, bindings[v]))]
        if not wanted:
            return ()
        if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
            return None
        inside = {id(n) for n in subtree(line)}
        if any(m.applied and id(m.node) in inside for m in self.ctx.matches):
            return None
        plain = {v: b.value for v, b in bindings.items() if isinstance(b, cst.Name)}
        taken = {n.value for n in subtree(self.ctx.facts.functions[-1]) if isinstance(n, cst.Name)}
        hoists = []
        for variable in wanted:
            try:
                name = match.hoist[variable].format_map(plain)
            except KeyError:  # a metavariable of the name matched more than a plain name
                return None
            if not name.isidentifier() or name in taken:
                return None
            hoists.append(Hoist(line, cast(cst.BaseExpression, bindings[variable]), variable, name))
        return tuple(hoists)


class PatternKind(Kind[PatternMatch]):
    key = "pattern"
    schema = PatternMatch
    matcher_type = PatternMatcher
    fixes = frozenset({"template"})

    def __init__(self, rules: Sequence[Rule]) -> None:
        super().__init__(rules)
        self.by_type: dict[type[cst.CSTNode], list[tuple[Rule, Pattern]]] = defaultdict(list)
        for rule, match in self.entries:
            for pattern in match.patterns:
                self.by_type[pattern.root_type].append((rule, pattern))

    @staticmethod
    def bindable(match: PatternMatch) -> set[str]:
        return set(METAVARIABLE.findall(" ".join([*match.pattern, *match.assigned])))

    @staticmethod
    def keys(match: PatternMatch) -> set[str]:
        """A call pattern shares the call kind's key; others are keyed by their anchor."""
        return {pattern.key for pattern in match.patterns}

    @classmethod
    def overlaps(cls, a: Rule, b: Rule) -> bool:
        """Two patterns overlap when some code could match both (a spelling of each)."""
        match_a, match_b = cast(PatternMatch, a.match), cast(PatternMatch, b.match)
        return any(x.unifies(y) for x in match_a.patterns for y in match_b.patterns)

    def need(self, prefilter: Prefilter) -> None:
        for patterns in self.by_type.values():
            for _, pattern in patterns:
                prefilter.need(frozenset(pattern.words))

    def anchor(self, anchors: Anchors) -> None:
        """A pattern's anchors (see Pattern.anchors); a match of a whole `def`, or one guarded by the
        data flow of its function, needs that whole function. So does one that reads a definition
        (`defines`): the `def` line spells the name called, so the function defined is a region
        too; a method's (`self.NAME`) is found in its class: a file that defines it is read whole."""
        for _, match in self.entries:
            for pattern in match.patterns:  # a spelling's anchors: one rule per spelling
                anchors.rule(
                    *pattern.anchors(),
                    function=bool(match.assigned or match.defines) or pattern.root_type is cst.FunctionDef,
                    whole=_methods_defined(match.defines),
                )


def _methods_defined(defines: dict[str, list[list[str]]]) -> re.Pattern[str] | bool:
    """The `def` lines of the methods (`self.NAME`) a match reads from its class: a file that
    has one is read whole, as regions hold only the method the match is in. A method's `def` is
    indented and takes `self` (timm's module-level `def gelu(x)` is no such method)."""
    methods = [re.escape(name.removeprefix("self.")) for name in defines if name.startswith("self.")]
    if not methods:
        return False
    return re.compile(rf"^[ \t]+(?:async[ \t]+)?def[ \t]+(?:{'|'.join(methods)})[ \t]*\(\s*self\b", re.M)


def assigned_names(statement: cst.CSTNode) -> set[str]:
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
        return framed(fixed, matched)
    if isinstance(matched, cst.BaseCompoundStatement) and isinstance(fixed, cst.BaseCompoundStatement):
        return fixed.with_changes(leading_lines=matched.leading_lines)
    return fixed
