"""Where the matched nodes are, as libcst's PositionProvider says (1-based lines, 0-based
character columns, syntactic ranges), at a third of its cost.

PositionProvider builds a line/column object at every token and every node; this records plain
character offsets during the same code generation and turns only the requested nodes' offsets
into lines and columns. It hooks libcst's code generation (`CodegenState`, `CSTNode._codegen`),
which libcst does not publish: the libcst range in pyproject.toml is pinned for that, and
tests/test_positions.py holds these positions to PositionProvider's on every node of real
files, so an upgrade that moves the hooks fails the suite rather than a user's scan."""

from __future__ import annotations

import bisect
import re
from collections.abc import Collection, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst.metadata import CodePosition, CodeRange

_NEWLINE = re.compile(r"\r\n?|\n")  # what libcst counts as a line break


_NOTHING = nullcontext()
# Nodes whose syntactic range libcst takes from their children's ranges (start_node/end_node):
# asking for one of these keeps its children's ranges too. Should libcst add another, the
# missing child range is noticed and every range is kept then.
_FROM_CHILDREN = (
    cst.BaseCompoundStatement,
    cst.BaseSuite,
    cst.SimpleStatementLine,
    cst.ImportFrom,
    cst.Else,
    cst.ExceptHandler,
    cst.ExceptStarHandler,
    cst.Finally,
    cst.MatchCase,
    cst.Module,
)


class _ChildRangeMissing(Exception):
    pass


class _OffsetState(CodegenState):
    """Code generation that keeps the character ranges of the wanted nodes (None: of all)."""

    def __init__(self, module: cst.Module, wanted: set[cst.CSTNode] | None) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.wanted = wanted
        self.offset = 0
        self.ranges: dict[cst.CSTNode, tuple[int, int]] = {}
        self._starts: dict[cst.CSTNode, int] = {}

    def add_indent_tokens(self) -> None:
        self.tokens.extend(self.indent_tokens)
        self.offset += sum(map(len, self.indent_tokens))

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        self.offset += len(value)

    def before_codegen(self, node: cst.CSTNode) -> None:
        if self.wanted is None or node in self.wanted:
            self._starts[node] = self.offset

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self._starts.pop(node, None)
        if start is not None and node not in self.ranges:  # a syntactic range recorded inside wins
            self.ranges[node] = (start, self.offset)

    def record_syntactic_position(  # type: ignore[override]  # a context manager either way
        self,
        node: cst.CSTNode,
        *,
        start_node: cst.CSTNode | None = None,
        end_node: cst.CSTNode | None = None,
    ) -> AbstractContextManager[None]:
        if self.wanted is not None and node not in self.wanted:
            return _NOTHING
        return self._record(node, start_node, end_node)

    @contextmanager
    def _record(
        self, node: cst.CSTNode, start_node: cst.CSTNode | None, end_node: cst.CSTNode | None
    ) -> Iterator[None]:
        start = self.offset
        try:
            yield
        finally:
            end = self.offset
            for child in (start_node, end_node):
                if child is not None and child not in self.ranges:
                    raise _ChildRangeMissing
            if start_node is not None:
                start = self.ranges[start_node][0]
            if end_node is not None:
                end = self.ranges[end_node][1]
            self.ranges[node] = (start, end)


def positions(module: cst.Module, nodes: Collection[cst.CSTNode]) -> Mapping[cst.CSTNode, CodeRange]:
    """The ranges of `nodes` (nodes of `module`)."""
    state = _OffsetState(module, _with_children(nodes))
    try:
        module._codegen(state)
    except _ChildRangeMissing:
        state = _OffsetState(module, None)
        module._codegen(state)
    code = "".join(state.tokens)
    line_starts = [0] + [m.end() for m in _NEWLINE.finditer(code)]

    def position(offset: int) -> CodePosition:
        line = bisect.bisect_right(line_starts, offset)
        return CodePosition(line, offset - line_starts[line - 1])

    return {
        node: CodeRange(position(state.ranges[node][0]), position(state.ranges[node][1])) for node in nodes
    }


def _with_children(nodes: Collection[cst.CSTNode]) -> set[cst.CSTNode]:
    """The nodes, and the children whose ranges theirs are taken from (_FROM_CHILDREN): all
    children of such a node, and theirs in turn where they are such nodes themselves."""
    wanted = set(nodes)
    pending = [n for n in nodes if isinstance(n, _FROM_CHILDREN)]
    while pending:
        for child in pending.pop().children:
            if child not in wanted:
                wanted.add(child)
                if isinstance(child, _FROM_CHILDREN):
                    pending.append(child)
    return wanted
