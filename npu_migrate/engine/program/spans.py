"""Where code is, in the coordinates the engine's findings use: 1-based lines and 0-based
character columns (the stdlib parser counts columns in UTF-8 bytes)."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

Position = tuple[int, int]  # (line, character column)


@dataclass(frozen=True, order=True)
class Span:
    start: Position
    end: Position  # exclusive

    def holds(self, other: Span) -> bool:
        return self.start <= other.start and other.end <= self.end

    @property
    def line(self) -> int:
        return self.start[0]


class Columns:
    """Character spans of stdlib nodes, over the file's lines."""

    def __init__(self, lines: Sequence[str]) -> None:
        self.lines = lines

    def _column(self, line: int, offset: int) -> int:
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        if text.isascii():
            return offset
        return len(text.encode("utf-8")[:offset].decode("utf-8", "ignore"))

    def span(self, node: ast.stmt | ast.expr) -> Span:
        first = min([node, *getattr(node, "decorator_list", ())], key=lambda n: (n.lineno, n.col_offset))
        end_line = node.end_lineno or node.lineno
        return Span(
            (first.lineno, self._column(first.lineno, first.col_offset)),
            (end_line, self._column(end_line, node.end_col_offset or 0)),
        )

    def around(self, nodes: Sequence[ast.stmt | ast.expr]) -> Span | None:
        """The span from the first of `nodes` to the last; None for none."""
        return Span(self.span(nodes[0]).start, self.span(nodes[-1]).end) if nodes else None
