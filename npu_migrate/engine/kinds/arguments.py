"""Reading a call's arguments the way rules describe them (by parameter name through a
signature, or by position) and checking conditions on them. Shared by the kinds that look at
calls: call, method and string."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Generic, TypeVar

import libcst as cst

from npu_migrate.engine.kinds.fields import ArgCondition, Argument
from npu_migrate.engine.names import dotted_parts, name_matches
from npu_migrate.engine.patterns import code_of
from npu_migrate.engine.regex import compile_rule_regex

if TYPE_CHECKING:
    from npu_migrate.engine.context import FileContext

STRING_LITERALS = (cst.SimpleString, cst.FormattedString)
T = TypeVar("T")


def callee(ctx: FileContext, node: cst.Call) -> str | None:
    """The qualified name of what a call calls, when it is an imported name."""
    parts = dotted_parts(node.func)
    return ctx.table.qualify(parts) if parts else None


def fits(call: cst.Call, signature: list[str], mapping: bool = False) -> bool:
    """Whether every argument of a call is one of `signature`'s parameters (no *args, extra
    positionals or other keywords; no **kwargs unless `mapping` lets one through)."""
    positional = [a for a in call.args if a.keyword is None and not (mapping and a.star == "**")]
    keywords = {a.keyword.value for a in call.args if a.keyword is not None}
    return (
        all(not a.star for a in positional)
        and len(positional) <= len(signature)
        and keywords <= set(signature[len(positional) :])
    )


class CalleeIndex(Generic[T]):
    """Items, each for some callees (engine.kinds.fields.Callees: a qualified name, `a.b.*` for
    any name under a.b, `.name` for a method, `*` for any call), found by a call's callee with
    a lookup rather than tested one by one (a file's every call asks), in the order given."""

    def __init__(self, items: Iterable[tuple[Sequence[str], T]]) -> None:
        self._any: list[tuple[int, T]] = []
        self._by: dict[str, list[tuple[int, T]]] = {}  # a name, `a.b.` (under a.b) or `.method`
        for order, (callees, item) in enumerate(items):
            for wanted in dict.fromkeys(callees):
                entry = (order, item)
                if wanted == "*":
                    self._any.append(entry)
                else:
                    self._by.setdefault(wanted.removesuffix("*"), []).append(entry)

    def of(self, qualified: str | None, method: str | None) -> list[T]:
        keys = [f".{method}"] if method else []
        if qualified is not None:
            parts = qualified.split(".")
            keys += [qualified, *(".".join(parts[:size]) + "." for size in range(1, len(parts)))]
        found = dict(self._any)
        for key in keys:
            found.update(self._by.get(key, ()))
        return [item for _, item in sorted(found.items(), key=lambda entry: entry[0])]


def arguments(node: cst.Call, place: Argument) -> Iterator[cst.BaseExpression]:
    """The values passed at `place`: by keyword, or positionally at the keyword's index in the
    signature or at the given position."""
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


def parameter(node: cst.Call, name: str, signature: list[str]) -> list[cst.BaseExpression]:
    """The values passed for one named parameter."""
    return list(arguments(node, Argument(of=["*"], keyword=[name], signature=signature)))


def passed(node: cst.Call, names: Iterable[str], signature: list[str]) -> dict[str, cst.BaseExpression]:
    """The value a call passes for each of these parameters that it passes."""
    return {name: values[0] for name in names if (values := parameter(node, name, signature))}


def strings_in(expr: cst.BaseExpression) -> Iterator[cst.SimpleString | cst.FormattedString]:
    """String literals that are the value of `expr` (see values_in)."""
    return (v for v in values_in(expr) if isinstance(v, STRING_LITERALS))


def values_in(expr: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    """`expr` and the expressions its value is made of, looking through conditionals, sequences
    and dict values (`device_map={"": "cuda:0"}`)."""
    yield expr
    if isinstance(expr, cst.IfExp):
        yield from values_in(expr.body)
        yield from values_in(expr.orelse)
    elif isinstance(expr, cst.BooleanOperation):
        yield from values_in(expr.left)
        yield from values_in(expr.right)
    elif isinstance(expr, cst.Tuple | cst.List | cst.Set):
        for element in expr.elements:
            yield from values_in(element.value)
    elif isinstance(expr, cst.Dict):
        for item in expr.elements:
            if isinstance(item, cst.DictElement):
                yield from values_in(item.value)


def static_text(node: cst.SimpleString | cst.FormattedString) -> str | None:
    """A literal's text; f-string fields read as '{}'. None for bytes."""
    if isinstance(node, cst.SimpleString):
        prefix = node.prefix.lower()
        if "b" in prefix:
            return None
        body = node.value[len(node.prefix) + len(node.quote) : -len(node.quote)]
        if "\r" not in body and ("\\" not in body or "r" in prefix):
            return body  # what evaluating it gives, without the parse that costs
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return "".join(p.value if isinstance(p, cst.FormattedStringText) else "{}" for p in node.parts)


def mappings(call: cst.Call) -> list[cst.Arg]:
    """The `**kwargs` a call passes."""
    return [a for a in call.args if a.star == "**"]


def conditions_hold(
    ctx: FileContext,
    node: cst.Call,
    conditions: dict[str, ArgCondition],
    signature: list[str],
    mapping: bool = False,
) -> bool:
    """With `mapping`, a `**kwargs` the call passes may carry any parameter: one that must be
    given counts as given."""
    unknown = any(a.star for a in node.args)
    carried = mapping and bool(mappings(node))
    return all(
        _condition_holds(ctx, parameter(node, name, signature), condition, unknown, carried)
        for name, condition in conditions.items()
    )


def _condition_holds(
    ctx: FileContext,
    values: list[cst.BaseExpression],
    condition: ArgCondition,
    unknown: bool,
    carried: bool,
) -> bool:
    if condition.present is not None:
        if condition.present != bool(values) and not (condition.present and carried):
            return False
        if not condition.present and unknown:
            return False  # *args or **kwargs may carry it: absence cannot be proven
    if condition.string is not None:
        texts = [static_text(s) for v in values for s in strings_in(v)]
        if not any(t is not None and compile_rule_regex(condition.string).fullmatch(t) for t in texts):
            return False
    if condition.name is not None:
        names = [ctx.table.qualify(p) for v in values if (p := dotted_parts(v))]
        if not any(name_matches(n, condition.name) for n in names):
            return False
    if condition.code is not None:
        codes: list[str | None] = [code_of(v, ctx.module) for v in values] or [condition.default]
        if not any(c in condition.code for c in codes):
            return False
    if condition.not_code is not None and any(code_of(v, ctx.module) in condition.not_code for v in values):
        return False
    return not condition.simple or all(dotted_parts(v) for v in values)
