"""The stdlib parser's tree of a file, read only where a scan needs it.

A scan parses a file with the stdlib parser to cut out the regions around the rules' anchors
(engine.regions), and that parse was most of a cold scan's cost. A top-level statement starts
at column 0, so the text alone shows where each one starts. The parser reads the top-level
definitions that hold a wanted line and every other top-level statement (imports, assignments,
`if __name__ == ...`: the program model and the import table read them); a definition that
spells `import` is read too (its imports bind names file-wide, as ImportTable reads them).
Each other definition stands in the tree as a stub: its kind, its name and its lines.

A line at column 0 that starts no statement lies in a string, in brackets or after a
backslash: the piece of code before it then does not parse alone (an unclosed string or
bracket), or, where that piece is a definition the parser skips, its brackets or triple quotes
do not pair up. Either way the whole file is parsed instead (`tree_around` returns None)."""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass

# What a line that starts a top-level statement cannot start with: blanks, a comment, the
# closing bracket of a statement above.
_NOT_A_START = " \t\f\r\n#)]}"
# A clause of the compound statement above (`else:`, `except ValueError:`), not a statement.
_CLAUSE = re.compile(r"(?:else|elif|except|finally)\b")
_DEFINITION = re.compile(r"(?:(async)\s+def|(def)|(class))\s+(\w+)")


@dataclass(frozen=True)
class Piece:
    """One top-level statement: its lines [start, end], `start` with the comment and blank
    lines above it, `line` its first line of code (a definition's first decorator)."""

    start: int
    line: int
    end: int
    kind: type[ast.stmt] | None = None  # FunctionDef, AsyncFunctionDef or ClassDef; None: no definition
    name: str = ""


@dataclass(frozen=True)
class PartialTree:
    """A module's tree, stubs standing for the definitions not read, and the line spans read."""

    tree: ast.Module
    read: list[tuple[int, int]]  # [start, end] of each run of pieces the parser read, in order

    def covers(self, first: int, last: int) -> bool:
        """Whether lines [first, last] lie in one run the parser read."""
        at = bisect.bisect_right(self.read, (first, float("inf"))) - 1
        return at >= 0 and self.read[at][0] <= first and last <= self.read[at][1]


def tree_around(
    lines: Sequence[str], wanted: Collection[int], parse: Callable[[str], ast.Module]
) -> PartialTree | None:
    """The tree of the file's top-level statements, read in full where they hold a `wanted`
    line (see the module's docstring); None where the text cannot be split so, or a piece of it
    does not parse alone (the caller parses the whole file, and sees its errors). `parse`: the
    stdlib parser, as the caller holds it to a recursion limit."""
    pieces = top_level_pieces(lines)
    if pieces is None:
        return None
    wanted_lines = sorted(wanted)
    body: list[ast.stmt] = []
    read: list[tuple[int, int]] = []
    for run, skipped in _runs(pieces, lines, wanted_lines):
        if skipped is not None:
            body.append(_stub(skipped))
            continue
        first, last = run[0].start, run[-1].end
        try:
            body += parse("\n" * (first - 1) + "".join(lines[first - 1 : last])).body
        except (SyntaxError, ValueError):
            return None
        read.append((first, last))
    return PartialTree(ast.Module(body=body, type_ignores=[]), read)


def top_level_pieces(lines: Sequence[str]) -> list[Piece] | None:
    """Each top-level statement as the text shows it: from a line at column 0 to the next
    (a clause such as `else:` continues the statement above, a decorator its definition). None
    when the text ends inside a decorator."""
    heads: list[Piece] = []
    decorated = 0  # the first decorator's line of the definition being read
    for number, text in enumerate(lines, start=1):
        if text[:1] in _NOT_A_START or (text[0] in "ef" and _CLAUSE.match(text)):
            continue
        if text[0] == "@":
            decorated = decorated or number
            continue
        line, decorated = decorated or number, 0
        definition = _DEFINITION.match(text)
        if definition is None:
            heads.append(Piece(line, line, line))
            continue
        is_async, is_def, _, name = definition.groups()
        kind = ast.AsyncFunctionDef if is_async else ast.FunctionDef if is_def else ast.ClassDef
        heads.append(Piece(line, line, line, kind, name))
    if decorated:
        return None
    pieces: list[Piece] = []
    for i, head in enumerate(heads):
        start = pieces[-1].end + 1 if pieces else 1
        end = _last_code(lines, head.line, heads[i + 1].line if i + 1 < len(heads) else len(lines) + 1)
        pieces.append(Piece(start, head.line, end, head.kind, head.name))
    return pieces


def _last_code(lines: Sequence[str], first: int, before: int) -> int:
    """The last line of code in [first, before): not blank, not a comment."""
    for number in range(before - 1, first, -1):
        text = lines[number - 1].lstrip()
        if text and text[0] != "#":
            return number
    return first


def _runs(
    pieces: list[Piece], lines: Sequence[str], wanted: list[int]
) -> Iterator[tuple[list[Piece], Piece | None]]:
    """The pieces in order: each run of pieces to read, as (run, None); each definition to
    leave out, as ([], it)."""
    run: list[Piece] = []
    for piece in pieces:
        if piece.kind is None or _holds(wanted, piece) or not _may_leave_out(lines, piece):
            run.append(piece)
            continue
        if run:
            yield run, None
            run = []
        yield [], piece
    if run:
        yield run, None


def _holds(wanted: list[int], piece: Piece) -> bool:
    at = bisect.bisect_left(wanted, piece.line)
    return at < len(wanted) and wanted[at] <= piece.end


def _may_leave_out(lines: Sequence[str], definition: Piece) -> bool:
    """Whether a definition with no wanted line may stand as a stub: it spells no `import` and
    its text pairs up (_closed). Its text is joined only here: a statement is always read."""
    code = "".join(lines[definition.line - 1 : definition.end])
    return "import" not in code and _closed(code)


def _closed(code: str) -> bool:
    """Whether a definition's brackets and triple quotes pair up and its last line continues
    nowhere: a piece that ends inside a string or brackets breaks one of these (and one that
    breaks them for another reason, a `"("` in a string, is read rather than left out)."""
    return (
        code.count("(") == code.count(")")
        and code.count("[") == code.count("]")
        and code.count("{") == code.count("}")
        and code.count('"""') % 2 == 0
        and code.count("'''") % 2 == 0
        and not code.rstrip().endswith("\\")
    )


def _stub(piece: Piece) -> ast.stmt:
    """A definition left out: its kind, name and lines, and a body of one `pass`."""
    assert piece.kind is not None
    body: list[ast.stmt] = [ast.Pass(lineno=piece.end, col_offset=0, end_lineno=piece.end, end_col_offset=0)]
    arguments = ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[])
    stub: ast.stmt
    if piece.kind is ast.ClassDef:
        stub = ast.ClassDef(name=piece.name, bases=[], keywords=[], body=body, decorator_list=[])
    elif piece.kind is ast.AsyncFunctionDef:
        stub = ast.AsyncFunctionDef(name=piece.name, args=arguments, body=body, decorator_list=[])
    else:
        stub = ast.FunctionDef(name=piece.name, args=arguments, body=body, decorator_list=[])
    stub.lineno, stub.col_offset, stub.end_lineno, stub.end_col_offset = piece.line, 0, piece.end, 0
    return stub
