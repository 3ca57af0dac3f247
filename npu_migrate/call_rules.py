"""The call part of the rewriter: method rules (`.cuda()`), call rules with argument
conditions, and the fixes they make (renames, keyword edits, call templates)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import libcst as cst

from npu_migrate.fixes import chain_source, edit_keywords, renamed_attribute, replace_expression
from npu_migrate.import_plan import renamed
from npu_migrate.names import dotted_parts, name_matches
from npu_migrate.patterns import code_of, fill
from npu_migrate.ruleset import ArgCondition, Argument, CallMatch, MethodMatch, Rule
from npu_migrate.string_rules import static_text, strings_in


def fits(call: cst.Call, signature: list[str]) -> bool:
    """Whether every argument of a call is one of `signature`'s parameters (no *args, **kwargs,
    extra positionals or other keywords)."""
    positional = [a for a in call.args if a.keyword is None]
    keywords = {a.keyword.value for a in call.args if a.keyword is not None}
    return (
        all(not a.star for a in positional)
        and len(positional) <= len(signature)
        and keywords <= set(signature[len(positional) :])
    )


class CallRules:
    """Mixin of the Rewriter: calls and methods."""

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
            if match.signature is not None and not fits(original, match.signature):
                continue
            if not self._conditions_hold(original, match.args, match.signature or []):
                continue
            new_func = renamed_attribute(rule, updated.func)
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
            if match.strict and not fits(original, match.signature):
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
            texts = [static_text(s) for v in values for s in strings_in(v)]
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
