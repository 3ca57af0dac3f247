"""Python that a shell command runs from the script's own text: `python -c 'CODE'` and a heredoc
fed to `python` (`python - <<'EOF'`), in launch scripts, a Dockerfile's RUN lines, a Makefile's
recipes and a notebook's `!` lines; and the Python files a Dockerfile's COPY heredocs write.
The engine reads the code as Python will (what the shell fills in, as underscores at the same
offsets) as a module of its own; its findings are placed where the code is in the file, and its
rewrite goes back between the quotes with what the shell fills in kept as the file spells it.
A fix that would edit that, or whose text the quoting cannot hold, is held."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from difflib import SequenceMatcher
from pathlib import PurePosixPath
from typing import Any

from npu_migrate.engine.index import RuleIndex
from npu_migrate.engine.sites import Lines
from npu_migrate.model import NO_MODULE, Applicability, Finding, Hold

_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
_OPTION_VALUES = {"-W", "-X", "-Q"}  # python's options that take the next word as their value
QUOTING = Hold(
    "quoted for the shell",
    "the fixed code holds what the shell's quoting around it would read (a quote, `$`, a "
    "backslash, the heredoc's terminator): edit it by hand",
)
FILLED = Hold(
    "Python the shell fills in",
    "the fix would edit what the shell puts into this code before Python reads it (a variable's "
    "value, an escape; or make, a `$`): edit it by hand",
)


@dataclass(frozen=True)
class Code:
    """Python code at start:end of the file: `text`, what Python reads there, at the same offsets
    (what the shell fills in, known only when it runs, as underscores; its escapes' backslashes as
    spaces); and what its quoting cannot hold: these bytes, a line that is the heredoc's
    terminator, a line led by a tab (`<<-` strips them)."""

    start: int
    end: int
    text: bytes
    forbidden: bytes
    terminator: bytes | None = None
    tabs_stripped: bool = False

    def rewritten(self, spelled: bytes, new: bytes) -> bytes | Hold:
        """The file's bytes for the code once Python is to read `new`: the rewrite's edits, with
        what the shell fills in (and every `$`, which may be make's) kept as the file spells it;
        or why that cannot be written."""
        kept = {i for i, (a, b) in enumerate(zip(spelled, self.text, strict=True)) if a != b or a == ord("$")}
        pieces, inserted = [], []
        for tag, i1, i2, j1, j2 in _opcodes(self.text, new):
            if tag == "equal":
                pieces.append(spelled[i1:i2])
                continue
            if any(i in kept for i in range(i1, i2)) or {i1 - 1, i1} <= kept:  # (an insertion inside)
                return FILLED
            pieces.append(new[j1:j2])
            inserted.append(new[j1:j2])
        written = b"".join(pieces)
        lines = written.split(b"\n")
        if (
            any(byte in self.forbidden for piece in inserted for byte in piece)
            or (self.terminator is not None and any(line.rstrip(b"\r") == self.terminator for line in lines))
            or (self.tabs_stripped and any(line.startswith(b"\t") for line in lines))
        ):
            return QUOTING
        return written


def _opcodes(old: bytes, new: bytes) -> Iterator[tuple[str, int, int, int, int]]:
    """difflib's opcodes from `old` to `new` in bytes: the lines matched first, then the bytes of
    the lines that differ (bytes compared whole are quadratic on a long heredoc: each byte value
    recurs throughout)."""
    old_lines, new_lines = old.splitlines(keepends=True), new.splitlines(keepends=True)
    old_at, new_at = _starts(old_lines), _starts(new_lines)
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, old_lines, new_lines, autojunk=False).get_opcodes():
        a1, a2, b1, b2 = old_at[i1], old_at[i2], new_at[j1], new_at[j2]
        if tag != "replace":
            yield tag, a1, a2, b1, b2
            continue
        for opcode in SequenceMatcher(None, old[a1:a2], new[b1:b2], autojunk=False).get_opcodes():
            yield opcode[0], a1 + opcode[1], a1 + opcode[2], b1 + opcode[3], b1 + opcode[4]


def _starts(lines: list[bytes]) -> list[int]:
    """Each line's offset, and the end."""
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    return starts


@dataclass
class Embedded:
    """What the rules found in a script's Python, and its edits to the file's bytes."""

    read: list[Code] = field(default_factory=list)  # the code the engine read (it parsed)
    findings: list[Finding] = field(default_factory=list)
    spans: list[tuple[int, int, bytes]] = field(default_factory=list)
    added_imports: list[tuple[int, str]] = field(default_factory=list)


def python_code(root: Any, data: bytes) -> list[Code]:
    """The Python code the script's commands run from its own text, where the shell hands it to
    Python byte for byte."""
    return list(_found(root, data))


def _found(node: Any, data: bytes) -> Iterator[Code]:
    finder = {"command": _dash_c, "redirected_statement": _heredoc}.get(node.type)
    if finder is not None and (code := finder(node, data)) is not None:
        yield code
    for child in node.children:
        yield from _found(child, data)


def _arguments(command: Any, data: bytes) -> list[Any] | None:
    """A python command's arguments (None: the command is no python)."""
    name = next((c for c in command.children if c.type == "command_name"), None)
    if name is None or not _PYTHON.fullmatch(PurePosixPath(_text(name, data)).name):
        return None
    return [
        c for c in command.children
        if c.start_byte >= name.end_byte and c.type != "comment" and not c.type.endswith("redirect")
    ]  # fmt: skip


def _dash_c(command: Any, data: bytes) -> Code | None:
    """`python [options] -c CODE ...`: CODE, where it is literal."""
    arguments = _arguments(command, data)
    if arguments is None:
        return None
    value_next = False
    for i, argument in enumerate(arguments):
        word = _text(argument, data)
        if value_next:
            value_next = False
        elif word == "-c":
            return _quoted(arguments[i + 1], data) if i + 1 < len(arguments) else None
        elif word in _OPTION_VALUES:
            value_next = True
        elif not word.startswith("-") or word == "-m":
            return None  # a script or a module runs, with its own arguments
    return None


def _quoted(argument: Any, data: bytes) -> Code | None:
    """The code between quotes: single quotes hand Python their bytes; double quotes, their
    bytes once the shell has filled in its expansions and escapes."""
    if argument.type not in ("raw_string", "string"):
        return None
    quoting = _SINGLE_QUOTED if argument.type == "raw_string" else _DOUBLE_QUOTED
    return _code(argument, data, argument.start_byte + 1, argument.end_byte - 1, quoting)


def _heredoc(statement: Any, data: bytes) -> Code | None:
    """`python [-] <<EOF`: the heredoc's body, python's script read from its standard input."""
    command = next((c for c in statement.children if c.type == "command"), None)
    redirect = next((c for c in statement.children if c.type == "heredoc_redirect"), None)
    if command is None or redirect is None:
        return None
    arguments = _arguments(command, data)
    if arguments is None or any(_text(a, data) not in ("-", "-u", "-B", "-E", "-I") for a in arguments):
        return None
    start = next((c for c in redirect.children if c.type == "heredoc_start"), None)
    body = next((c for c in redirect.children if c.type == "heredoc_body"), None)
    if start is None or body is None:
        return None
    delimiter = _text(start, data)
    quoted = delimiter[:1] in ("'", '"')
    tabs = any(c.type == "<<-" for c in redirect.children)
    code = _code(body, data, body.start_byte, body.end_byte, _QUOTED_HEREDOC if quoted else _UNQUOTED_HEREDOC)
    terminator = delimiter.strip("'\"").encode()
    return replace(code, terminator=terminator, tabs_stripped=tabs)


_CONTENT = {"string_content", "heredoc_content", '"'}
# A quoting: the bytes a backslash before which the shell drops (an escape), and those a rewrite
# put inside it may not hold (they would end it, or be expanded)
_SINGLE_QUOTED = (b"", b"'")
_DOUBLE_QUOTED = (b'$`"\\\n', b'$`"\\')
_QUOTED_HEREDOC = (b"", b"")
_UNQUOTED_HEREDOC = (b"$`\\\n", b"$`\\")


def _code(node: Any, data: bytes, start: int, end: int, quoting: tuple[bytes, bytes]) -> Code:
    """The code at start:end of a string or heredoc node, as Python reads it."""
    filled = [(c.start_byte, c.end_byte) for c in node.children if c.type not in _CONTENT]  # expansions
    return filled_code(data, start, end, quoting, filled)


def heredoc_file(data: bytes, start: int, end: int, delimiter: bytes, tabs_stripped: bool) -> Code:
    """A heredoc's body that a Dockerfile writes into a Python file (`COPY <<EOF /app/x.py`):
    BuildKit fills in `$NAME` and `${NAME}` where the delimiter is unquoted, as a shell would."""
    quoted = delimiter[:1] in (b"'", b'"')
    filled = [] if quoted else [m.span() for m in _EXPANSION.finditer(data, start, end)]
    code = filled_code(data, start, end, _QUOTED_HEREDOC if quoted else _UNQUOTED_HEREDOC, filled)
    return replace(code, terminator=delimiter.strip(b"'\""), tabs_stripped=tabs_stripped)


_EXPANSION = re.compile(rb"\$\{[^$}\n]*\}|\$\w+")  # (no `$` inside: linear on `${${${`)


def filled_code(
    data: bytes, start: int, end: int, quoting: tuple[bytes, bytes], filled: list[tuple[int, int]]
) -> Code:
    """The code at start:end as Python reads it: the `filled` spans (what the shell puts there)
    as underscores, line breaks kept; the quoting's escapes' backslashes as spaces."""
    escapes, forbidden = quoting
    text = bytearray(data[start:end])
    for span_start, span_end in filled:
        for at in range(span_start, span_end):
            if text[at - start] != ord("\n"):
                text[at - start] = ord("_")
    at = 0
    while at < len(text) - 1:
        if text[at] == ord("\\") and text[at + 1] in escapes:
            text[at] = ord(" ")
            at += 1
        at += 1
    return Code(start, end, bytes(text), forbidden)


def migrate_embedded(
    data: bytes, found: list[Code], index: RuleIndex, enabled: frozenset[Applicability]
) -> Embedded:
    """The rules over each piece of code that parses as Python (one that does not is left to the
    shell's reading, as any other text), placed in the file; its fixes applied where the file
    spells the code as Python reads it and the quoting holds the rewrite, else held."""
    from npu_migrate.engine.source import migrate_source

    embedded = Embedded()
    lines = Lines(data)
    for code in found:
        result = migrate_source(code.text, index, enabled, NO_MODULE)
        if result.error is not None:
            continue
        embedded.read.append(code)
        line, column = lines.point(code.start)
        written = (
            None
            if result.new_source is None
            else code.rewritten(data[code.start : code.end], result.new_source)
        )
        for finding in result.findings:
            placed = _placed(finding, line, column)
            if isinstance(written, Hold) and finding.replacement is not None:  # a scan says so too
                placed = replace(placed, applied=False, replacement=None, held=written)
            embedded.findings.append(placed)
        if isinstance(written, bytes):
            embedded.spans.append((code.start, code.end, written))
            embedded.added_imports += [(line + n - 1, module) for n, module in result.added_imports]
    return embedded


def _placed(finding: Finding, line: int, column: int) -> Finding:
    """A finding of the code read alone, where the code is in the file (line, column: its start)."""
    return replace(
        finding,
        line=finding.line + line - 1,
        column=finding.column + (column - 1 if finding.line == 1 else 0),
        end_line=finding.end_line + line - 1,
        end_column=finding.end_column + (column - 1 if finding.end_line == 1 else 0),
    )


def _text(node: Any, data: bytes) -> str:
    return data[node.start_byte : node.end_byte].decode(errors="replace")
