"""The holds decided during the pass: code that already handles the NPU (an if/elif chain,
conditional expression or dict literal that names the NPU, a `try` that imports torch_npu), whose
CUDA side, rewritten, would shadow the NPU branch or write NPU calls into code that runs only
without torch_npu. What the program model decides after the pass (guards over code left CUDA,
dual-path files, the code's own attributes, comparisons) is engine.program_holds'."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterator, Sequence

import libcst as cst

from npu_migrate.engine.reasons import CUDA_MEMBER, DUAL_PATH, NPU_BRANCH
from npu_migrate.model import Hold

# The NPU named as a word: `torch_npu`, `is_npu`, `isNpuAvailable`, `NPUAccelerator`, "npu:0",
# "hccl"; not `input` or `INPUT`.
_NPU_WORD = re.compile(
    r"(?<![a-z])(?:npus?|hccl)(?![a-z])|(?<![A-Z])(?:NPU[Ss]?|HCCL)(?![a-z])|(?<![A-Z])(?:Npus?|Hccl)(?![a-z])"
)

NPU_AWARE = "already handles the NPU"
# Node types whose NPU awareness is decided when the walk enters them (exact types: the walk
# tests every node, and a set lookup is cheaper than isinstance).
ZONE_TYPES = frozenset({cst.If, cst.IfExp, cst.Dict, cst.Try})


def names_npu(text: str) -> bool:
    """Whether an identifier, a string or a file's words name the NPU as a word."""
    return _NPU_WORD.search(text) is not None


class NpuZones:
    """Decides which code already handles the NPU, for one walk of one tree: whether a subtree
    names the NPU is worked out once per node (a dict nested 200 deep is asked about at every
    level; walking each level's subtree again made that quadratic)."""

    def __init__(self) -> None:
        self._mentions: dict[cst.CSTNode, bool] = {}

    def why(self, node: cst.CSTNode) -> Hold | None:
        """Why nothing inside `node` may be rewritten (it already handles the NPU), or None."""
        if isinstance(node, cst.If) and any(self._mentions_npu(test) for test in _chain_tests(node)):
            return _aware("this if/elif chain tests for the NPU, so each branch stays as it is")
        if isinstance(node, cst.IfExp) and self._mentions_npu(node.test):
            return _aware("this conditional expression tests for the NPU")
        entries = node.elements if isinstance(node, cst.Dict) else ()
        if any(
            self._mentions_npu(e.key) or self._mentions_npu(e.value)
            for e in entries
            if isinstance(e, cst.DictElement)
        ):
            return _aware("this mapping has an NPU entry")
        if isinstance(node, cst.Try) and any(self._imports_torch_npu(s) for s in node.body.body):
            return _aware("this try imports torch_npu; its handlers run only without it")
        return None

    def _mentions_npu(self, expression: cst.CSTNode) -> bool:
        """Whether a name or string under `expression` names the NPU; each node decided once,
        children before parents, on a stack of its own (the tree may be deeper than Python's)."""
        known = self._mentions
        pending: list[tuple[cst.CSTNode, Sequence[cst.CSTNode] | None]] = [(expression, None)]
        while pending:
            node, children = pending.pop()
            if node in known:
                continue
            if children is None:
                children = node.children
                pending.append((node, children))
                pending.extend((child, None) for child in children if child not in known)
            else:
                known[node] = _names_npu_itself(node) or any(known[child] for child in children)
        return known[expression]

    def _imports_torch_npu(self, statement: cst.CSTNode) -> bool:
        if not isinstance(statement, cst.SimpleStatementLine):
            return False
        for small in statement.body:
            if isinstance(small, cst.Import) and any(self._mentions_npu(a.name) for a in small.names):
                return True
            module = small.module if isinstance(small, cst.ImportFrom) else None
            if module is not None and self._mentions_npu(module):
                return True
        return False


def dual_path(why: str) -> Hold:
    """A file that keeps a path for the NPU beside CUDA (engine.program knows `why`)."""
    return Hold(
        DUAL_PATH,
        f"{NPU_AWARE}: this file keeps a path for the NPU beside CUDA ({why}); rewritten for the NPU, "
        "its GPU path would break: make it device-neutral or leave it",
    )


def cuda_member(beside: str) -> Hold:
    """A file that is the CUDA member of a family of per-device modules (`beside`: the others)."""
    return Hold(
        CUDA_MEMBER,
        f"this file is the CUDA member of a family of per-device modules ({beside} beside it): it "
        "stays the GPU path; add an NPU member beside them",
    )


def _aware(why: str) -> Hold:
    return Hold(NPU_BRANCH, f"{NPU_AWARE}: {why}")


def subtree(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """`node` and every node under it, in source order; a stack, not nested generators (each
    node yielded through a chain of `yield from` as deep as the tree costs depth squared)."""
    pending = [node]
    while pending:
        current = pending.pop()
        yield current
        pending.extend(reversed(children(current)))


def children(node: cst.CSTNode) -> tuple[cst.CSTNode, ...]:
    """A node's children, read from its fields: libcst's `children` rebuilds the node to list
    them, about ten times slower. Fields follow the source order but for where a node's tokens
    (whitespace, parentheses, commas) go, which no walk here looks at; the node types whose
    fields put code out of source order are asked of libcst (an argument's keyword is spelled
    before its value). A value is a node by its exact type (`isinstance` of libcst's abstract
    base classes costs more than the walk)."""
    kind = type(node)
    if kind in _FIELDS_OUT_OF_ORDER:
        return tuple(node.children)
    found: list[cst.CSTNode] = []
    for name in _fields(kind):
        value = getattr(node, name)
        if type(value) in NODE_TYPES:
            found.append(value)
        elif type(value) is tuple or type(value) is list:
            found += [item for item in value if type(item) in NODE_TYPES]
    return tuple(found)


def concrete_types(*bases: type) -> frozenset[type]:
    """The node types that are these or derive from them (libcst's node classes are abstract
    bases and dataclasses that are never subclassed again)."""
    found: set[type] = set()
    pending = list(bases)
    while pending:
        kind = pending.pop()
        if kind not in found:
            found.add(kind)
            pending.extend(kind.__subclasses__())
    return frozenset(found)


NODE_TYPES = concrete_types(cst.CSTNode)


@functools.cache
def _fields(kind: type[cst.CSTNode]) -> tuple[str, ...]:
    if kind is cst.Arg:  # its fields list the value before the keyword
        return ("keyword", "equal", "value", "comma", "whitespace_after_star", "whitespace_after_arg")
    return tuple(f.name for f in dataclasses.fields(kind))


# Decorators, a conditional expression's test, an except clause's type, a case's guard, and
# positional-only parameters come first in the source but not in the fields.
_FIELDS_OUT_OF_ORDER = frozenset(
    {cst.FunctionDef, cst.ClassDef, cst.IfExp, cst.ExceptHandler, cst.ExceptStarHandler, cst.MatchCase,
     cst.Parameters}
)  # fmt: skip


def _chain_tests(node: cst.If) -> Iterator[cst.BaseExpression]:
    current: cst.If | cst.Else | None = node
    while isinstance(current, cst.If):
        yield current.test
        current = current.orelse


def _names_npu_itself(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Name | cst.SimpleString | cst.FormattedStringText) and names_npu(node.value)
