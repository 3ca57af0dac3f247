"""Tensor ranks proven from a function's own code: a fused operator that reads its inputs as
(B, N, S, D) must get 4-D tensors, and a guard can only say so where the code shows it.

A rank is proven by the value a name last got before the point asked about: a `view`,
`reshape` or `permute` with its sizes spelled out, an einops `rearrange` whose output side is
written out, and what keeps or changes a known rank (`transpose`, `contiguous`, casts, an
integer index, `unbind`, `chunk` and `split` unpacked). A value bound in a branch counts only
if every binding since the last unconditional one agrees. A parameter has the rank every call of
its function in the file passes, where the whole file is at hand (`callers`): a top-level
function called by name, or a method called as `self.name(...)`, and referred to no other way
(callers in other files are not seen: a public helper's rank is what this file passes it).
Anything else (a module call, a helper's return) is unknown: the guard holds the fix."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

import libcst as cst

from npu_migrate.engine.holds import subtree
from npu_migrate.engine.names import dotted_parts, method_of

# Methods that give a tensor of their receiver's rank, and functions that give their first
# argument's.
KEEPS_RANK = frozenset({
    "transpose", "contiguous", "float", "half", "bfloat16", "double", "to", "type_as", "type",
    "clone", "detach", "softmax", "mul", "div", "add", "sub", "masked_fill", "expand_as", "cuda",
    "npu", "cpu", "requires_grad_",
})  # fmt: skip
KEEPS_RANK_FUNCTIONS = frozenset({"normalize"})
_SPELLED = frozenset({"view", "reshape", "permute"})  # the sizes (or the order) spelled out
_TENSOR_RESULTS = KEEPS_RANK | _SPELLED | {"unsqueeze", "squeeze", "expand", "repeat"}  # never None
_UNPACKED_KEEP = frozenset({"chunk", "split", "tensor_split"})  # each part keeps the rank
_DEPTH = 12
_HOPS = 3  # calls followed back from a parameter


@dataclass(frozen=True)
class Binding:
    value: cst.BaseExpression | None  # None: unknown
    index: int | None  # the element of a tuple target it binds, if any
    conditional: bool  # inside a compound statement that does not hold the point asked about
    order: int  # bindings are numbered in source order: a value reads the bindings before its own


def number(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Integer | cst.Float) or (
        isinstance(node, cst.UnaryOperation) and isinstance(node.expression, cst.Integer | cst.Float)
    )


class Ranks:
    """The ranks of values in one function, asked at one statement of it."""

    def __init__(
        self, function: cst.FunctionDef, at: cst.CSTNode, callers: cst.Module | None = None, hops: int = 0
    ) -> None:
        self.function = function
        self.at = at
        self.callers = callers  # the whole file, where parameters may be followed to their calls
        self.hops = hops  # calls followed to get here
        self._bindings: dict[str, list[Binding]] = {}
        self._count = 0
        self._read(function.body, conditional=False)

    def of(self, expression: cst.BaseExpression, depth: int = 0, before: int = 1 << 30) -> int | None:
        """The rank of `expression` at the statement asked about, or None where not proven."""
        if depth > _DEPTH:
            return None
        if isinstance(expression, cst.Name):
            return self._of_name(expression.value, depth, before)
        if isinstance(expression, cst.Call) and (kept := kept_from(expression)) is not None:
            return self.of(kept, depth + 1, before)
        if isinstance(expression, cst.Call) and isinstance(expression.func, cst.Attribute):
            return self._of_method(expression, depth, before)
        if isinstance(expression, cst.Call):
            return _rearranged(expression)
        if isinstance(expression, cst.Subscript):
            inner = self.of(expression.value, depth + 1, before)
            change = _indexed(expression)
            return None if inner is None or change is None else inner + change
        if isinstance(expression, cst.BinaryOperation):
            tensors = [s for s in (expression.left, expression.right) if not number(s)]
            if len(tensors) == 1:  # a tensor and a number: the tensor's rank
                return self.of(tensors[0], depth + 1, before)
        return None

    def never_none(self, expression: cst.BaseExpression, depth: int = 0, before: int = 1 << 30) -> bool:
        """Whether the code shows `expression` is never None at the statement asked about: it is
        arithmetic (`bias + mask`), a tensor method's result (`bias.unsqueeze(0)`), a method of
        this function's class whose every return is such a value, or a name whose bindings since
        the last unconditional one all are. A parameter may be None."""
        if depth > _DEPTH:
            return False
        if isinstance(expression, cst.BinaryOperation | cst.UnaryOperation):
            return True  # None in arithmetic raises: the result is a value
        if isinstance(expression, cst.Name):
            reaching = self.reaching(expression.value, before)
            return bool(reaching) and all(
                b.value is not None and b.index is None and self.never_none(b.value, depth + 1, b.order)
                for b in reaching
            )
        if isinstance(expression, cst.Call) and isinstance(expression.func, cst.Attribute):
            method = expression.func.attr.value
            if method in _TENSOR_RESULTS:
                return True
            if isinstance(expression.func.value, cst.Name) and expression.func.value.value == "self":
                return self._returns_values(method, depth)
        return False

    def reaching(self, name: str, before: int = 1 << 30) -> list[Binding]:
        """The bindings of `name` that may give its value before binding number `before`: the
        last one that always runs and those in branches after it; none where no binding always
        runs."""
        bindings = [b for b in self._bindings.get(name, []) if b.order < before]
        last = next((i for i in range(len(bindings) - 1, -1, -1) if not bindings[i].conditional), None)
        return [] if last is None else bindings[last:]

    def _returns_values(self, method: str, depth: int) -> bool:
        """Whether the method `method` of this function's class (in the file) returns a value
        that is never None on every `return`, and returns at all."""
        found = method_of(self.callers, self.function, method) if self.callers is not None else None
        if found is None:
            return False
        returns = [n for n in subtree(found.body) if isinstance(n, cst.Return)]
        return bool(returns) and all(
            r.value is not None and Ranks(found, statement_of(found, r)).never_none(r.value, depth + 1)
            for r in returns
        )

    def _of_name(self, name: str, depth: int, before: int) -> int | None:
        if not any(b.order < before for b in self._bindings.get(name, [])):
            return self._of_parameter(name)
        ranks = {self._of_binding(b, depth + 1) for b in self.reaching(name, before)}
        return ranks.pop() if len(ranks) == 1 else None  # none that always runs, or they disagree

    def _of_parameter(self, name: str) -> int | None:
        """The rank every call of this function in the file passes for parameter `name`."""
        if self.callers is None or self.hops >= _HOPS:
            return None
        calls = _calls_of(self.callers, self.function)
        params = [*self.function.params.posonly_params, *self.function.params.params]
        position = next((i for i, p in enumerate(params) if p.name.value == name), None)
        if calls is None or not calls[1] or position is None:
            return None
        method, found = calls
        position -= method  # `self` is not passed
        ranks = set()
        for call, caller, statement in found:
            argument = _argument(call, position, name)
            if argument is None:
                return None
            ranks.add(Ranks(caller, statement, self.callers, self.hops + 1).of(argument))
        return ranks.pop() if len(ranks) == 1 else None

    def _of_binding(self, binding: Binding, depth: int) -> int | None:
        value, before = binding.value, binding.order
        if value is None:
            return None
        if binding.index is None:
            return self.of(value, depth, before)
        if isinstance(value, cst.Tuple | cst.List):
            elements = value.elements
            if binding.index < len(elements) and not isinstance(elements[binding.index], cst.StarredElement):
                return self.of(elements[binding.index].value, depth, before)
            return None
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
            method = value.func.attr.value
            receiver = self.of(value.func.value, depth, before)
            if receiver is None:
                return None
            if method == "unbind":
                return receiver - 1
            if method in _UNPACKED_KEEP:
                return receiver
        if (
            isinstance(value, cst.Call)
            and (dotted_parts(value.func) or [""])[-1] in _UNPACKED_KEEP
            and value.args
        ):
            return self.of(value.args[0].value, depth, before)  # torch.chunk(x, 2, dim=-1)
        return None

    def _of_method(self, call: cst.Call, depth: int, before: int) -> int | None:
        assert isinstance(call.func, cst.Attribute)
        method = call.func.attr.value
        if method in ("cat", "concat", "stack") and isinstance(call.func.value, cst.Name) and call.args:
            # torch.cat([a, b], dim=...): the parts' rank, which torch makes them share (one more, stacked)
            parts = call.args[0].value
            if not isinstance(parts, cst.List | cst.Tuple):
                return None
            ranks = {self.of(e.value, depth + 1, before) for e in parts.elements} - {None}
            return ranks.pop() + (method == "stack") if len(ranks) == 1 else None  # type: ignore[operator]
        if method in _SPELLED:
            return _spelled(call)
        if method in KEEPS_RANK:
            return self.of(call.func.value, depth + 1, before)
        receiver = self.of(call.func.value, depth + 1, before)
        if receiver is not None and method == "unsqueeze":
            return receiver + 1
        if receiver is not None and method == "squeeze" and call.args:
            return receiver - 1
        return None

    def _read(self, body: cst.BaseSuite, conditional: bool) -> bool:
        """Records the bindings before `self.at`; True once `self.at` is reached."""
        if isinstance(body, cst.SimpleStatementSuite):  # `if x: a = b`
            for small in body.body:
                self._bind(small, conditional)
            return False
        for statement in cast(cst.IndentedBlock, body).body:
            if statement is self.at:
                return True
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    self._bind(small, conditional)
                continue
            if isinstance(statement, cst.FunctionDef | cst.ClassDef):
                self._add(statement.name.value, None, None, conditional)  # a definition: no tensor
                continue
            assert isinstance(statement, cst.BaseCompoundStatement)
            for suite in _suites(statement):
                if _contains(suite, self.at):
                    return self._read(suite, conditional)
            for suite in _suites(statement):
                self._read(suite, conditional=True)
            for name in _header_names(statement):
                self._add(name, None, None, conditional)  # a loop target, `with ... as x`: unknown
        return False

    def _add(self, name: str, value: cst.BaseExpression | None, index: int | None, conditional: bool) -> None:
        """A binding of `name` (value None: one whose rank this module does not prove)."""
        self._count += 1
        self._bindings.setdefault(name, []).append(Binding(value, index, conditional, self._count))

    def _bind(self, statement: cst.BaseSmallStatement, conditional: bool) -> None:
        if isinstance(statement, cst.Assign):
            for target in statement.targets:
                self._bind_target(target.target, statement.value, conditional)
        elif isinstance(statement, cst.AnnAssign) and statement.value is not None:
            self._bind_target(statement.target, statement.value, conditional)
        elif (
            isinstance(statement, cst.AugAssign)
            and isinstance(statement.target, cst.Name)
            and not number(statement.value)  # `x *= 2` keeps a tensor's rank; anything else: unknown
        ):
            self._add(statement.target.value, None, None, conditional)

    def _bind_target(self, target: cst.BaseExpression, value: cst.BaseExpression, conditional: bool) -> None:
        if isinstance(target, cst.Name):
            self._add(target.value, value, None, conditional)
        elif isinstance(target, cst.Tuple | cst.List):
            for index, element in enumerate(target.elements):
                if isinstance(element.value, cst.Name):
                    starred = isinstance(element, cst.StarredElement)
                    if starred:
                        self._add(element.value.value, None, None, conditional)
                    else:
                        self._add(element.value.value, value, index, conditional)


def _calls_of(
    module: cst.Module, function: cst.FunctionDef
) -> tuple[bool, list[tuple[cst.Call, cst.FunctionDef, cst.CSTNode]]] | None:
    """Whether `function` is a method, and every call of it in the module with the function and
    statement it is made in; None where it is referred to otherwise (passed on, decorated,
    called from outside a function), so its callers are not all seen."""
    name = function.name.value
    top = any(s is function for s in module.body)
    method = not top and any(
        isinstance(c, cst.ClassDef) and any(s is function for s in cast(cst.IndentedBlock, c.body).body)
        for c in module.body
    )
    if not (top or method) or function.decorators:
        return None
    found: list[tuple[cst.Call, cst.FunctionDef, cst.CSTNode]] = []
    referred = 0

    def refers(node: cst.CSTNode) -> bool:
        if method:
            return (
                isinstance(node, cst.Attribute)
                and node.attr.value == name
                and isinstance(node.value, cst.Name)
                and node.value.value == "self"
            )
        return isinstance(node, cst.Name) and node.value == name

    def walk(node: cst.CSTNode, caller: cst.FunctionDef | None, statement: cst.CSTNode | None) -> None:
        nonlocal referred
        if isinstance(node, cst.FunctionDef):
            caller = node
            walk(node.body, caller, None)  # its name and parameters refer to nothing
            return
        if isinstance(node, cst.SimpleStatementLine | cst.BaseCompoundStatement) and caller is not None:
            statement = node if isinstance(node, cst.SimpleStatementLine) or statement is None else statement
            if isinstance(node, cst.BaseCompoundStatement):
                statement = node
        if refers(node):
            referred += 1
        if isinstance(node, cst.Call) and refers(node.func) and caller is not None and statement is not None:
            found.append((node, caller, statement))
        for child in node.children:
            walk(child, caller, statement)

    for statement in module.body:
        walk(statement, None, None)
    return (method, found) if referred == len(found) else None


def module_scope(module: cst.Module) -> cst.FunctionDef:
    """A script's top level read as the body of a function without parameters, so that its
    bindings are followed as a function's are (the statements are the module's own nodes)."""
    return cst.FunctionDef(cst.Name("_"), cst.Parameters(), cst.IndentedBlock(body=module.body))


def statement_of(function: cst.FunctionDef, node: cst.CSTNode) -> cst.CSTNode:
    """The statement of `function`'s own body (at any depth of blocks) that holds `node`."""
    for statement in subtree(function.body):
        if isinstance(statement, cst.SimpleStatementLine) and _contains(statement, node):
            return statement
    return node


def _argument(call: cst.Call, position: int, name: str) -> cst.BaseExpression | None:
    """The value a call passes for the parameter at `position` named `name` (None: not passed,
    or hidden in *args / **kwargs)."""
    positional = [a for a in call.args if a.keyword is None]
    if any(a.star for a in call.args):
        return None
    if position < len(positional):
        return positional[position].value
    return next((a.value for a in call.args if a.keyword is not None and a.keyword.value == name), None)


def _suites(statement: cst.BaseCompoundStatement) -> Iterator[cst.BaseSuite]:
    """The bodies of a compound statement, in order (an `if`'s elif/else chain included)."""
    node: cst.CSTNode | None = statement
    while node is not None:
        body = getattr(node, "body", None)
        if isinstance(body, cst.BaseSuite):
            yield body
        for handler in getattr(node, "handlers", ()):
            yield handler.body
        for case in getattr(node, "cases", ()):
            yield case.body
        for attribute in ("orelse", "finalbody"):
            extra = getattr(node, attribute, None)
            if isinstance(extra, cst.If):
                yield from _suites(extra)
            elif extra is not None and isinstance(getattr(extra, "body", None), cst.BaseSuite):
                yield extra.body
        node = None


def _header_names(statement: cst.BaseCompoundStatement) -> Iterator[str]:
    """The names a compound statement's header binds (a loop's target, `with ... as x`)."""
    targets: list[cst.BaseExpression] = []
    if isinstance(statement, cst.For):
        targets.append(statement.target)
    if isinstance(statement, cst.With):
        targets += [item.asname.name for item in statement.items if item.asname is not None]
    for target in targets:
        for node in subtree(target):
            if isinstance(node, cst.Name):
                yield node.value


def _contains(tree: cst.CSTNode, node: cst.CSTNode) -> bool:
    return any(n is node for n in subtree(tree))


def kept_from(call: cst.Call) -> cst.BaseExpression | None:
    """The argument whose rank (and axes) a rank-keeping function gives (`F.normalize(q, dim=-1)`)."""
    parts = dotted_parts(call.func)
    if parts and parts[-1] in KEEPS_RANK_FUNCTIONS and call.args and not call.args[0].star:
        return call.args[0].value if call.args[0].keyword is None else None
    return None


def _spelled(call: cst.Call) -> int | None:
    """The rank a `view`/`reshape`/`permute` spells (see spelled_sizes)."""
    sizes = spelled_sizes(call)
    return len(sizes) if sizes else None


def spelled_sizes(call: cst.Call) -> list[cst.BaseExpression] | None:
    """The sizes (or axes) a `view`/`reshape`/`permute` spells: its arguments, or the elements
    of one tuple or list argument; None for a shape held in a variable (`x.view(shape)`,
    `*sizes`)."""
    args = call.args
    if any(a.star or a.keyword for a in args):
        return None
    if len(args) == 1:
        only = args[0].value
        if isinstance(only, cst.Tuple | cst.List):
            elements = only.elements
            return (
                None
                if any(isinstance(e, cst.StarredElement) for e in elements)
                else [e.value for e in elements]
            )
        if number(only):
            return [only]
        return None  # `x.view(shape)`, `x.view(torch.float16)`
    return [a.value for a in args] or None


_EINOPS_AXIS = re.compile(r"\([^()]*\)?|\.\.\.|[^\s().]+|\.")


def _rearranged(call: cst.Call) -> int | None:
    """An einops `rearrange(x, "b n (h d) -> b h n d", ...)`: the output side's axes."""
    if (dotted_parts(call.func) or [""])[-1] != "rearrange" or len(call.args) < 2:
        return None
    spec = call.args[1].value
    if not isinstance(spec, cst.SimpleString) or "->" not in spec.evaluated_value:
        return None
    output = str(spec.evaluated_value).split("->", 1)[1]
    axes = _EINOPS_AXIS.findall(output)
    return None if "..." in axes else len(axes)


def _indexed(subscript: cst.Subscript) -> int | None:
    """How indexing changes a rank: -1 per integer index, +1 per None, 0 per slice; None for
    anything else (a tensor index, an ellipsis beside integers)."""
    change = 0
    for element in subscript.slice:
        index = element.slice
        if isinstance(index, cst.Slice):
            continue
        if not isinstance(index, cst.Index):
            return None
        value = index.value
        if number(value):
            change -= 1
        elif isinstance(value, cst.Name) and value.value == "None":
            change += 1
        elif isinstance(value, cst.Ellipsis) and len(subscript.slice) == 1:
            continue
        else:
            return None
    return change
