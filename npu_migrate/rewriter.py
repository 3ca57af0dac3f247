"""The one-pass matcher and fixer: a libcst transformer that knows the match kinds, never the
individual rules. Each node type consults only the rules indexed for it; every match becomes a
Finding, and its fix is applied when the rule's applicability is enabled."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import CodeRange

from npu_migrate.fixes import chain_source, edit_keywords, replace_expression, substitute_string
from npu_migrate.import_plan import ImportPlan, PlannedImport, import_path, regroup, renamed, renamed_by
from npu_migrate.index import NameHit, RuleIndex, StringRule
from npu_migrate.names import ImportTable, dotted_parts, module_name, name_matches, small_statements
from npu_migrate.patterns import Pattern, code_of, fill
from npu_migrate.ruleset import (
    Applicability,
    ArgCondition,
    Argument,
    CallMatch,
    MethodMatch,
    PatternMatch,
    Rule,
)

_STRING = (cst.SimpleString, cst.FormattedString)
_COMPARE_OPS = (cst.Equal, cst.NotEqual, cst.In, cst.NotIn)


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


def _strings_in(expr: cst.BaseExpression) -> Iterator[cst.SimpleString | cst.FormattedString]:
    """String literals that are the value of `expr`, looking through conditionals and sequences."""
    if isinstance(expr, _STRING):
        yield expr
    elif isinstance(expr, cst.IfExp):
        yield from _strings_in(expr.body)
        yield from _strings_in(expr.orelse)
    elif isinstance(expr, cst.BooleanOperation):
        yield from _strings_in(expr.left)
        yield from _strings_in(expr.right)
    elif isinstance(expr, cst.Tuple | cst.List | cst.Set):
        for element in expr.elements:
            yield from _strings_in(element.value)


def static_text(node: cst.SimpleString | cst.FormattedString) -> str | None:
    """A literal's text; f-string fields read as '{}'. None for bytes."""
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return "".join(p.value if isinstance(p, cst.FormattedStringText) else "{}" for p in node.parts)


def _glob(name: str, globs: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, g) for g in globs)


def _fits(call: cst.Call, signature: list[str]) -> bool:
    """Whether every argument of a call is one of `signature`'s parameters (no *args, **kwargs,
    extra positionals or other keywords)."""
    positional = [a for a in call.args if a.keyword is None]
    keywords = {a.keyword.value for a in call.args if a.keyword is not None}
    return (
        all(not a.star for a in positional)
        and len(positional) <= len(signature)
        and keywords <= set(signature[len(positional) :])
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


def _renamed_attribute(rule: Rule, node: cst.Attribute) -> cst.Attribute | None:
    """`x.cuda` -> `x.npu` by the rule's rename map, or None when the rule has no such fix."""
    new = rule.fix.rename.get(node.attr.value) if rule.fix and rule.fix.rename else None
    return node.with_changes(attr=cst.Name(new)) if new else None


class Rewriter(cst.CSTTransformer):
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
        return self._found(rules[0], original, updated, _renamed_attribute(rules[0], updated))  # type: ignore[return-value]

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

    # ------------------------------------------------------------ calls and methods

    def visit_Call(self, node: cst.Call) -> None:
        callee = self._callee(node)
        method = node.func.attr.value if isinstance(node.func, cst.Attribute) else None
        for string_rule in self.index.strings:
            for where in string_rule.where:
                place = where.argument
                if place is None or not self._callee_is(place, callee, method):
                    continue
                if not self._conditions_hold(node, place.when, place.signature):
                    continue
                for value in self._arguments(node, place):
                    self._mark(string_rule, value)

    def _callee(self, node: cst.Call) -> str | None:
        parts = dotted_parts(node.func)
        return self.table.qualify(parts) if parts else None

    @staticmethod
    def _callee_is(place: Argument, callee: str | None, method: str | None) -> bool:
        if "*" in place.of or (method and f".{method}" in place.of):
            return True
        return name_matches(callee, place.of)

    @staticmethod
    def _arguments(node: cst.Call, place: Argument) -> Iterator[cst.BaseExpression]:
        positional = [a for a in node.args if a.keyword is None and not a.star]
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value in place.keyword:
                yield arg.value
        indexes = {place.signature.index(k) for k in place.keyword if k in place.signature}
        if place.position is not None:
            indexes.add(place.position)
        for i in sorted(indexes):
            if i < len(positional):
                yield positional[i].value

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        result = self._fix_method(original, updated)
        return self._fix_call(original, result) if isinstance(result, cst.Call) else result

    def _fix_method(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if not isinstance(updated.func, cst.Attribute) or not isinstance(original.func, cst.Attribute):
            return updated
        receiver = dotted_parts(original.func.value)
        if receiver and self.table.qualify(receiver):
            return updated  # `module.function(...)` is not a method call
        for rule in self.index.methods.get(updated.func.attr.value, []):
            match = rule.match
            if not isinstance(match, MethodMatch):
                continue
            if match.signature is not None and not _fits(original, match.signature):
                continue
            if not self._conditions_hold(original, match.args, match.signature or []):
                continue
            new_func = _renamed_attribute(rule, updated.func)
            fixed = updated.with_changes(func=new_func) if new_func else None
            return self._found(rule, original, updated, fixed)  # type: ignore[return-value]
        return updated

    def _fix_call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        """The first call rule (in catalog order) whose conditions hold: specific rewrites come
        before the rule that reports the calls they cannot prove safe."""
        callee = self._callee(original)
        for rule in self.index.calls.rules_for(callee) if callee else []:
            match = rule.match
            if not isinstance(match, CallMatch):
                continue
            if match.strict and not _fits(original, match.signature):
                continue
            if not self._conditions_hold(original, match.args, match.signature):
                continue
            return self._found(
                rule, original, updated, *self._call_fix(rule, match, callee, original, updated)
            )  # type: ignore[return-value]
        return updated

    def _call_fix(
        self, rule: Rule, match: CallMatch, callee: str, original: cst.Call, updated: cst.Call
    ) -> tuple[cst.BaseExpression | None, ...]:
        """The fixed call and any module the fix needs, or (None,) for a report-only rule."""
        fix = rule.fix
        if fix and fix.keywords:
            return (edit_keywords(updated, fix.keywords),)
        if fix and fix.rename and (new := renamed(callee, fix.rename)):
            source, module = chain_source(dotted_parts(original.func) or [], new, self.table, self.plan)
            return updated.with_changes(func=replace_expression(updated.func, source)), module
        if fix and fix.template:
            codes = {
                param: code_of(values[0], self.module)
                for param in {*match.signature, *match.args}
                if (
                    values := list(
                        self._arguments(
                            updated, Argument(of=["*"], keyword=[param], signature=match.signature)
                        )
                    )
                )
            }
            try:
                needed: list[str] = []
                for param, default in fix.defaults.items():
                    if param not in codes:
                        node, more = fill(default, codes, self.table.spell)
                        codes[param], needed = code_of(node, self.module), needed + more
                node, more = fill(fix.template, codes, self.table.spell)
            except ValueError:
                return (None,)  # an argument the template needs is missing: report only
            return node.with_changes(lpar=updated.lpar, rpar=updated.rpar), *needed, *more
        return (None,)

    def _conditions_hold(
        self, node: cst.Call, conditions: dict[str, ArgCondition], signature: list[str]
    ) -> bool:
        if not conditions:
            return True
        unknown = any(a.star for a in node.args)
        for param, condition in conditions.items():
            place = Argument(of=["*"], keyword=[param], signature=signature)
            values = list(self._arguments(node, place))
            if not self._condition_holds(values, condition, unknown):
                return False
        return True

    def _condition_holds(
        self, values: list[cst.BaseExpression], condition: ArgCondition, unknown: bool
    ) -> bool:
        if condition.present is not None:
            if condition.present != bool(values):
                return False
            if not condition.present and unknown:
                return False  # *args or **kwargs may carry it: absence cannot be proven
        if condition.string is not None:
            texts = [static_text(s) for v in values for s in _strings_in(v)]
            if not any(t is not None and re.fullmatch(condition.string, t) for t in texts):
                return False
        if condition.name is not None:
            names = [self.table.qualify(p) for v in values if (p := dotted_parts(v))]
            if not any(name_matches(n, condition.name) for n in names):
                return False
        if condition.code is not None:
            codes = [code_of(v, self.module) for v in values] or [condition.default]
            if not any(c in condition.code for c in codes):
                return False
        return not condition.simple or all(dotted_parts(v) for v in values)

    # ------------------------------------------------------------ strings in their contexts

    def _mark(self, string_rule: StringRule, value: cst.BaseExpression) -> None:
        for string in _strings_in(value):
            text = static_text(string)
            if text is not None and string_rule.regex.fullmatch(text):
                self._strings.setdefault(string, string_rule.rule)

    def _mark_where(self, kind: str, value: cst.BaseExpression | None, accept) -> None:
        if value is None:
            return
        for string_rule in self.index.strings:
            for where in string_rule.where:
                spec = getattr(where, kind)
                if spec is not None and accept(spec):
                    self._mark(string_rule, value)

    def visit_Comparison(self, node: cst.Comparison) -> None:
        operands = [node.left, *(t.comparator for t in node.comparisons)]
        for i, target in enumerate(node.comparisons):
            if not isinstance(target.operator, _COMPARE_OPS):
                continue
            left, right = operands[i], operands[i + 1]
            for value, other in ((left, right), (right, left)):
                if isinstance(other, _STRING):
                    continue
                text = self.module.code_for_node(other)
                self._mark_where("compare", value, lambda globs, t=text: _glob(t, globs))

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._mark_assignment(target.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._mark_assignment(node.target, node.value)

    def _mark_assignment(self, target: cst.BaseExpression, value: cst.BaseExpression | None) -> None:
        name = target.attr.value if isinstance(target, cst.Attribute) else getattr(target, "value", None)
        if isinstance(name, str):
            self._mark_where("assign", value, lambda globs: _glob(name, globs))

    def visit_Param(self, node: cst.Param) -> None:
        self._not_references.add(node.name)
        self._mark_where("param", node.default, lambda globs: _glob(node.name.value, globs))

    def visit_DictElement(self, node: cst.DictElement) -> None:
        if isinstance(node.key, cst.SimpleString) and isinstance(node.key.evaluated_value, str):
            key = node.key.evaluated_value
            self._mark_where("key", node.value, lambda globs: _glob(key, globs))

    def visit_Subscript(self, node: cst.Subscript) -> None:
        parts = dotted_parts(node.value)
        mapping = self.table.qualify(parts) if parts else None
        if mapping is None or len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
            return
        index = node.slice[0].slice.value
        self._mark_where("subscript", index, lambda names: name_matches(mapping, names))

    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString) -> cst.BaseExpression:
        return self._fix_string(original, updated)

    def leave_FormattedString(
        self, original: cst.FormattedString, updated: cst.FormattedString
    ) -> cst.BaseExpression:
        return self._fix_string(original, updated)

    def _fix_string(self, original, updated):
        rule = self._strings.get(original)
        if rule is None:
            return updated
        fixed = substitute_string(updated, rule.fix.substitute) if rule.fix and rule.fix.substitute else None
        return self._found(rule, original, updated, fixed)

    # ------------------------------------------------------------ code patterns

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
