"""Which assignments of a name reach a statement of a function (or a script's top level, read
as one): the last binding that always runs before it, and those in branches after that one. A
call's result moved to a device later through the name it was given (`acc = torch.zeros(...)`,
then `acc = acc.to(device)`) is found through them."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

import libcst as cst

from npu_migrate.engine.holds import subtree


@dataclass(frozen=True)
class Binding:
    value: cst.BaseExpression | None  # None: unknown (a tuple's element, a loop target, ...)
    conditional: bool  # inside a compound statement that does not hold the point asked about


def number(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Integer | cst.Float) or (
        isinstance(node, cst.UnaryOperation) and isinstance(node.expression, cst.Integer | cst.Float)
    )


class Bindings:
    """The bindings of names in one function, before one statement of it."""

    def __init__(self, function: cst.FunctionDef, at: cst.CSTNode) -> None:
        self.function = function
        self.at = at
        self._bindings: dict[str, list[Binding]] = {}
        self._read(function.body, conditional=False)

    def reaching(self, name: str) -> list[Binding]:
        """The bindings of `name` that may give its value at the statement: the last one that
        always runs and those in branches after it; none where no binding always runs."""
        bindings = self._bindings.get(name, [])
        last = next((i for i in range(len(bindings) - 1, -1, -1) if not bindings[i].conditional), None)
        return [] if last is None else bindings[last:]

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
                self._add(statement.name.value, None, conditional)  # a definition: no tensor
                continue
            assert isinstance(statement, cst.BaseCompoundStatement)
            for suite in _suites(statement):
                if _contains(suite, self.at):
                    return self._read(suite, conditional)
            for suite in _suites(statement):
                self._read(suite, conditional=True)
            for name in _header_names(statement):
                self._add(name, None, conditional)  # a loop target, `with ... as x`: unknown
        return False

    def _add(self, name: str, value: cst.BaseExpression | None, conditional: bool) -> None:
        """A binding of `name`, after those before it (value None: one whose value is not known)."""
        self._bindings.setdefault(name, []).append(Binding(value, conditional))

    def _bind(self, statement: cst.BaseSmallStatement, conditional: bool) -> None:
        if isinstance(statement, cst.Assign):
            for target in statement.targets:
                self._bind_target(target.target, statement.value, conditional)
        elif isinstance(statement, cst.AnnAssign) and statement.value is not None:
            self._bind_target(statement.target, statement.value, conditional)
        elif (
            isinstance(statement, cst.AugAssign)
            and isinstance(statement.target, cst.Name)
            and not number(statement.value)  # `x *= 2` keeps the tensor; anything else: unknown
        ):
            self._add(statement.target.value, None, conditional)

    def _bind_target(self, target: cst.BaseExpression, value: cst.BaseExpression, conditional: bool) -> None:
        if isinstance(target, cst.Name):
            self._add(target.value, value, conditional)
        elif isinstance(target, cst.Tuple | cst.List):  # each name gets a part of the value
            for element in target.elements:
                if isinstance(element.value, cst.Name):
                    self._add(element.value.value, None, conditional)


@functools.lru_cache(maxsize=4)
def module_scope(module: cst.Module) -> cst.FunctionDef:
    """A script's top level read as the body of a function without parameters, so that its
    bindings are followed as a function's are (the statements are the module's own nodes). One
    per module, so that what is worked out per scope is worked out once for its top level."""
    return cst.FunctionDef(cst.Name("_"), cst.Parameters(), cst.IndentedBlock(body=module.body))


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
