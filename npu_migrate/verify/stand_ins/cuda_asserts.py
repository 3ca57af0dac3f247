"""The original's checks that its tensors are on CUDA, answered where the original runs as the
reference without CUDA: in an `assert` of a module of the tree, `x.device.type == 'cuda'`,
`str(x.device) == 'cuda'` and `x.is_cuda` read as true (Wan2.1's flash_attention asserts
`q.device.type == 'cuda' and q.size(-1) <= 256`: the head-dim half still holds). Only asserts
change, only in the tree's own files, and each answered assert is listed in the report."""

from __future__ import annotations

import ast
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence
from pathlib import Path


def _names_a_device(node: ast.expr) -> bool:
    """`x.device`, `x.device.type`, `str(x.device)`: an expression that reads a device."""
    return any(isinstance(n, ast.Attribute) and n.attr in ("device", "type") for n in ast.walk(node))


def _is_cuda(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.split(":")[0] == "cuda"
    )


class _Answer(ast.NodeTransformer):
    """Inside one assert's test: each CUDA check becomes `True`."""

    def __init__(self) -> None:
        self.changed = False

    def _true(self, node: ast.expr) -> ast.expr:
        self.changed = True
        return ast.copy_location(ast.Constant(True), node)

    def visit_Compare(self, node: ast.Compare) -> ast.expr:
        if len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq):
            left, right = node.left, node.comparators[0]
            if (_is_cuda(right) and _names_a_device(left)) or (_is_cuda(left) and _names_a_device(right)):
                return self._true(node)
        return self.generic_visit(node)  # type: ignore[return-value]

    def visit_Attribute(self, node: ast.Attribute) -> ast.expr:
        if node.attr == "is_cuda" and isinstance(node.ctx, ast.Load):
            return self._true(node)
        return self.generic_visit(node)  # type: ignore[return-value]


class _Asserts(ast.NodeTransformer):
    def __init__(self) -> None:
        self.lines: list[int] = []

    def visit_Assert(self, node: ast.Assert) -> ast.Assert:
        answer = _Answer()
        node.test = answer.visit(node.test)
        if answer.changed:
            self.lines.append(node.lineno)
        return node


class _AnsweringLoader(importlib.machinery.SourceFileLoader):
    """Compiles a module of the tree with its CUDA asserts answered (never from or into the
    bytecode cache, which holds the unanswered code)."""

    def __init__(self, fullname: str, path: str, answered: list[str], root: Path) -> None:
        super().__init__(fullname, path)
        self.answered, self.root = answered, root

    def get_code(self, fullname: str) -> types.CodeType | None:
        source = self.get_data(self.path).decode("utf-8", errors="surrogateescape")
        if "assert" not in source or "cuda" not in source:
            return super().get_code(fullname)
        tree = ast.parse(source, self.path)
        asserts = _Asserts()
        asserts.visit(tree)
        if not asserts.lines:
            return super().get_code(fullname)
        lines = source.splitlines()
        where = Path(self.path).resolve().relative_to(self.root).as_posix()
        self.answered += [f"{where}:{n}: {lines[n - 1].strip()}" for n in asserts.lines]
        return compile(tree, self.path, "exec", dont_inherit=True)


class CudaAsserts(importlib.abc.MetaPathFinder):
    """Loads the tree's modules through `_AnsweringLoader`; `answered` lists what it answered."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.answered: list[str] = []

    def loader(self, fullname: str, path: str) -> _AnsweringLoader:
        return _AnsweringLoader(fullname, path, self.answered, self.root)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        origin = spec.origin if spec is not None else None
        if spec is None or not origin or not origin.endswith(".py"):
            return None
        if not Path(origin).resolve().is_relative_to(self.root):
            return None
        spec.loader = self.loader(fullname, origin)
        return spec

    def install(self) -> CudaAsserts:
        sys.meta_path.insert(0, self)
        return self
