"""What the rules may ask about the code around a node, gathered during the one pass: which
names are references (not keywords, parameter names or attribute names), the dotted chains
they form, and the function being walked."""

from __future__ import annotations

import libcst as cst

from npu_migrate.engine.fixes import is_guard_test
from npu_migrate.engine.names import dotted_parts


class Facts:
    """Visit hooks that run before every match kind's, so kinds can ask about the node."""

    def __init__(self) -> None:
        self._not_references: set[cst.CSTNode] = set()
        self.chains: dict[cst.CSTNode, list[str]] = {}  # outermost dotted references -> their parts
        self.functions: list[cst.FunctionDef] = []
        self.line: cst.SimpleStatementLine | None = None  # the simple statement line being walked
        self.conditionals: list[cst.IfExp] = []  # the conditional expressions around the node

    def is_reference(self, node: cst.Name | cst.Attribute) -> bool:
        return node not in self._not_references

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._not_references.add(node.keyword)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._not_references.add(node.name)
        self.functions.append(node)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.functions.pop()

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self.line = node

    def leave_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self.line = None

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self.conditionals.append(node)

    def leave_IfExp(self, node: cst.IfExp) -> None:
        self.conditionals.pop()

    def fallback_of(self, node: cst.CSTNode) -> cst.IfExp | None:
        """The conditional expression whose `else` value `node` is, if any."""
        return next((c for c in reversed(self.conditionals) if c.orelse is node), None)

    def kept_by_guard(self, node: cst.CSTNode, guard: str) -> bool:
        """Whether `node` is the original a guarded fix kept (`... if <guard>(...) is None else
        node`): fused already."""
        conditional = self.fallback_of(node)
        return conditional is not None and is_guard_test(conditional.test, guard)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._not_references.add(node.name)

    def visit_AsName(self, node: cst.AsName) -> None:
        self._not_references.add(node.name)

    def visit_Param(self, node: cst.Param) -> None:
        self._not_references.add(node.name)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        """Only the outermost attribute of a dotted chain is a reference to resolve."""
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
        self.chains[node] = parts

    # Names inside these statements are bindings or declarations, never references.
    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_Global(self, node: cst.Global) -> bool:
        return False

    def visit_Nonlocal(self, node: cst.Nonlocal) -> bool:
        return False
