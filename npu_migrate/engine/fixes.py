"""Edits a fix makes to one node. Each returns the new node; none evaluates or duplicates user
expressions, and keyword arguments stay keywords."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import libcst as cst

from npu_migrate.engine.imports import ImportPlan, import_path
from npu_migrate.engine.names import ImportTable
from npu_migrate.engine.patterns import Spell, fill
from npu_migrate.engine.regex import compile_rule_regex

if TYPE_CHECKING:
    from npu_migrate.rules.schema import KeywordEdit, Rule, Substitute


def chain_source(
    parts: list[str], new_qualified: str, table: ImportTable, plan: ImportPlan
) -> tuple[str, str | None]:
    """Source text for a dotted name whose qualified name becomes `new_qualified`, and the
    module that must then be imported (None when the file's imports already provide it)."""
    head = parts[0]
    if head in plan.locals:
        target, local = plan.locals[head].target, plan.locals[head].local
        for candidate in (new_qualified, import_path(new_qualified)):
            if candidate == target or candidate.startswith(target + "."):
                return local + candidate[len(target) :], None
    target = table.bindings.get(head, "")
    if target and (new_qualified == target or new_qualified.startswith(target + ".")):
        return head + new_qualified[len(target) :], None  # keep the alias the author used
    return table.spell(new_qualified)


def framed(new: cst.BaseExpression, old: cst.BaseExpression) -> cst.BaseExpression:
    """`new` in `old`'s place: with `old`'s parentheses where it has them, else with its own
    (a template's `(a if c else b)` keeps them, so `.transpose(...)` after it reads it whole)."""
    return new.with_changes(lpar=old.lpar or new.lpar, rpar=old.rpar or new.rpar)


def guarded(
    fused: cst.BaseExpression, guard: cst.BaseExpression, original: cst.BaseExpression
) -> cst.BaseExpression:
    """`(fused if guard is None else original)`: the fused operator where the guard finds its
    limits hold for the values the program runs with, else the code as it was (its own
    parentheses go inside the conditional's)."""
    bare = original.with_changes(lpar=[], rpar=[])
    return cst.IfExp(guard_passes(guard), fused, bare, lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def filled_guard(
    guard: str, fused: cst.CSTNode, original: cst.CSTNode, codes: dict[str, str], spell: Spell
) -> tuple[cst.BaseExpression, list[str]]:
    """A rule's guard filled like its template, around the fused and the original expression
    (see guarded), and the modules the guard needs; ValueError as `fill`."""
    guard_node, needed = fill(guard, codes, spell)
    assert isinstance(fused, cst.BaseExpression) and isinstance(original, cst.BaseExpression)
    assert isinstance(guard_node, cst.BaseExpression)  # a guard guards an expression
    return guarded(fused, guard_node, original), needed


def guard_passes(guard: cst.BaseExpression) -> cst.Comparison:
    """`<guard> is None`: the test a guarded fix writes (an expression's or a statement run's)."""
    return cst.Comparison(guard, [cst.ComparisonTarget(cst.Is(), cst.Name("None"))])


def guard_helper(guard: str) -> str:
    """The helper a rule's guard calls (`why_not_npu_rotary_mul` of `why_not_npu_rotary_mul($X)`)."""
    return guard.split("(", 1)[0].strip()


def is_guard_test(test: cst.BaseExpression, guard: str) -> bool:
    """Whether `test` is `<the guard's helper>(...) is None`: code a guarded fix wrote, whose
    `else` is the original it keeps (not to be fused again)."""
    return (
        isinstance(test, cst.Comparison)
        and isinstance(test.left, cst.Call)
        and isinstance(test.left.func, cst.Name)
        and test.left.func.value == guard_helper(guard)
        and len(test.comparisons) == 1
        and isinstance(test.comparisons[0].operator, cst.Is)
    )


def replace_expression(old: cst.BaseExpression, code: str) -> cst.BaseExpression:
    new = cst.parse_expression(code)
    return new.with_changes(lpar=old.lpar, rpar=old.rpar)


def substituted(text: str, edits: list[Substitute]) -> str:
    for edit in edits:
        text = compile_rule_regex(edit.pattern).sub(edit.to, text)
    return text


def substitute_string(
    node: cst.SimpleString | cst.FormattedString, edits: list[Substitute]
) -> cst.SimpleString | cst.FormattedString:
    if isinstance(node, cst.SimpleString):
        quote = node.quote
        start = len(node.prefix) + len(quote)
        inner = node.value[start : len(node.value) - len(quote)]
        return node.with_changes(value=node.value[:start] + substituted(inner, edits) + quote)
    parts = [
        part.with_changes(value=substituted(part.value, edits))
        if isinstance(part, cst.FormattedStringText)
        else part
        for part in node.parts
    ]
    return node.with_changes(parts=parts)


def edit_keywords(call: cst.Call, edit: KeywordEdit) -> cst.Call:
    args: list[cst.Arg] = []
    present = set()
    for arg in call.args:
        name = arg.keyword.value if arg.keyword else None
        if name in edit.drop:
            continue
        if name in edit.rename:
            arg = arg.with_changes(keyword=cst.Name(edit.rename[name]))
            name = edit.rename[name]
        if name in edit.set:
            arg = arg.with_changes(value=cst.parse_expression(edit.set[name]))
        present.add(name)
        args.append(arg)
    for name, code in edit.set.items():
        if name not in present:
            args.append(
                cst.Arg(
                    keyword=cst.Name(name),
                    value=cst.parse_expression(code),
                    equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
                )
            )
    return call.with_changes(args=_fix_commas(args, call.args))


def _fix_commas(args: list[cst.Arg], original: Sequence[cst.Arg]) -> list[cst.Arg]:
    """Every argument but the last needs a comma; the last keeps the original's trailing style."""
    trailing = original[-1].comma if original else cst.MaybeSentinel.DEFAULT
    fixed = []
    for i, arg in enumerate(args):
        if i < len(args) - 1:
            if not isinstance(arg.comma, cst.Comma):
                arg = arg.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        else:
            arg = arg.with_changes(comma=trailing)
        fixed.append(arg)
    return fixed


def renamed_attribute(rule: Rule, node: cst.Attribute) -> cst.Attribute | None:
    """`x.cuda` -> `x.npu` by the rule's rename map, or None when the rule has no such fix."""
    new = rule.fix.rename.get(node.attr.value) if rule.fix and rule.fix.rename else None
    return node.with_changes(attr=cst.Name(new)) if new else None
