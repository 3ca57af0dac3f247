"""The string part of the rewriter: string literals that denote something (a device, a
backend, an environment variable) because of where they stand, found by their context and
edited in place."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator

import libcst as cst

from npu_migrate.fixes import substitute_string
from npu_migrate.index import StringRule
from npu_migrate.names import dotted_parts, name_matches

_STRING = (cst.SimpleString, cst.FormattedString)
_COMPARE_OPS = (cst.Equal, cst.NotEqual, cst.In, cst.NotIn)


def strings_in(expr: cst.BaseExpression) -> Iterator[cst.SimpleString | cst.FormattedString]:
    """String literals that are the value of `expr`, looking through conditionals and sequences."""
    if isinstance(expr, _STRING):
        yield expr
    elif isinstance(expr, cst.IfExp):
        yield from strings_in(expr.body)
        yield from strings_in(expr.orelse)
    elif isinstance(expr, cst.BooleanOperation):
        yield from strings_in(expr.left)
        yield from strings_in(expr.right)
    elif isinstance(expr, cst.Tuple | cst.List | cst.Set):
        for element in expr.elements:
            yield from strings_in(element.value)


def static_text(node: cst.SimpleString | cst.FormattedString) -> str | None:
    """A literal's text; f-string fields read as '{}'. None for bytes."""
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return "".join(p.value if isinstance(p, cst.FormattedStringText) else "{}" for p in node.parts)


def _glob(name: str, globs: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, g) for g in globs)


class StringRules:
    """Mixin of the Rewriter: string literals in their contexts."""

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

    def _mark(self, string_rule: StringRule, value: cst.BaseExpression) -> None:
        for string in strings_in(value):
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
