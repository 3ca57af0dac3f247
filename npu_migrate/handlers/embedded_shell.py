"""Shell inside other files: a Dockerfile's RUN, CMD, ENTRYPOINT, ENV and FROM lines, and a
Makefile's recipes and exported variables. Each file is handed to the shell handler with a *view*
of it: the same bytes at the same offsets, with what is not shell blanked to spaces (newlines
kept), so that bash's grammar reads only the shell, every finding is where it is in the file,
and every fix edits the file's own bytes."""

from __future__ import annotations

import re

from npu_migrate.engine.index import RuleIndex
from npu_migrate.engine.suppressions import Suppressions
from npu_migrate.handlers.embedded_python import Code, heredoc_file
from npu_migrate.handlers.shell import migrate_script
from npu_migrate.model import NO_MODULE, Applicability, FileResult, ModulePath

_INSTRUCTION = re.compile(rb"[ \t]*([A-Za-z]+)[ \t]*")
_SHELL_FORM = {b"RUN", b"CMD", b"ENTRYPOINT"}
_SHELL_SHEBANG = re.compile(rb"\b(?:ba|da|z|k)?sh\b")
_HEREDOC = re.compile(rb"<<-?[ \t]*[\"']?([\w.-]+)[\"']?")
_MAKE_ASSIGNMENT = re.compile(rb"(export[ \t]+)?([A-Za-z_][A-Za-z0-9_]*)[ \t]*([:?+!]?=|::=)")
_RECIPE_PREFIX = re.compile(rb"\t[ \t@+-]*")
_DEFINE = re.compile(rb"[ \t]*(?:(?:override|export)[ \t]+)*define[ \t]+([A-Za-z_][A-Za-z0-9_]*)")
_ENDEF = re.compile(rb"[ \t]*endef\b")
_MAKE_REFERENCE = re.compile(rb"(?<!\$)\$[({](\w+)[)}]")  # $(NAME) or ${NAME}, not the shell's $$(...)
_MAKE_FUNCTION = re.compile(rb"(?<!\$)\$([({])[a-z][a-z-]*[ \t]")  # $(if ...), $(shell ...)
_SHELL_REFERENCE = re.compile(rb"\$\{\w+\}")
_CONTINUATION = re.compile(rb"\\\r?\n")
# Where make names a variable without expanding it: `ifdef NAME`, `$(origin NAME)`
_MAKE_NAMED = re.compile(rb"^[ \t]*ifn?def[ \t]+(\w+)|(?<!\$)\$[({](?:origin|flavor|value)[ \t]+(\w+)[)}]")


def migrate_dockerfile(
    data: bytes, index: RuleIndex, enabled: frozenset[Applicability], where: ModulePath = NO_MODULE
) -> FileResult:
    view, python_files = _dockerfile(data)  # (no suppressions: a Dockerfile's comments are whole lines)
    return migrate_script(data, view, index, enabled, Suppressions([]), python_files=python_files)


def migrate_makefile(
    data: bytes, index: RuleIndex, enabled: frozenset[Applicability], where: ModulePath = NO_MODULE
) -> FileResult:
    view = makefile_view(data)
    texts = makefile_text(data, view)
    return migrate_script(data, view, index, enabled, Suppressions.in_lines(data), texts)


def blanked(text: bytes) -> bytes:
    """The text as spaces, its line breaks kept: bytes at the same offsets that bash reads as nothing."""
    return re.sub(rb"[^\n]", b" ", text)


def _logical_lines(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of each line, a line that ends in a backslash joined with the next."""
    spans, start = [], 0
    lines = data.split(b"\n")
    at = 0
    for number, line in enumerate(lines):
        at += len(line) + (1 if number < len(lines) - 1 else 0)
        if not line.rstrip(b" \t\r").endswith(b"\\") or number == len(lines) - 1:
            spans.append((start, at))
            start = at
    return spans


def dockerfile_view(data: bytes) -> bytes:
    """RUN, CMD and ENTRYPOINT in shell form as the commands they run; ENV, and ARG with a
    default, as assignments (the legacy `ENV KEY value` as `KEY=value`); FROM as a command whose
    words name the image (its tag says CUDA); every other instruction and exec forms (JSON
    arrays) blanked. A heredoc a RUN opens keeps its text up to its terminator; one COPY or ADD
    writes keeps its text where it writes a shell script (a `.sh` file, or a shell's `#!`)."""
    return _dockerfile(data)[0]


def _dockerfile(data: bytes) -> tuple[bytes, list[Code]]:
    """The Dockerfile's view (dockerfile_view), and the Python files its COPY and ADD heredocs
    write (a `.py` file, or a python `#!`)."""
    view = bytearray(blanked(data))
    python: list[Code] = []
    lines = _logical_lines(data)
    number = 0
    while number < len(lines):
        start, end = lines[number]
        number += 1
        text = data[start:end]
        instruction = _INSTRUCTION.match(text)
        if text.lstrip().startswith(b"#") or instruction is None:
            continue
        keyword = instruction[1].upper()
        body = instruction.end()
        if keyword in _SHELL_FORM and not text[body:].startswith(b"["):
            script = text[body:].startswith(b"<<")  # `RUN <<EOT`: the heredoc's text is the script
            if not script:
                view[start + body : end] = text[body:]
            for terminator in _HEREDOC.findall(text[body:]):
                number = _heredoc(data, lines, number, terminator, view, keep_terminator=not script)
        elif keyword in (b"COPY", b"ADD") and b"<<" in text[body:]:
            heredocs = [
                (m[0].removeprefix(b"<<-").removeprefix(b"<<").strip(), m[1])
                for m in _HEREDOC.finditer(text[body:])
            ]
            target = text[body:].split()[-1] if text[body:].split() else b""
            for delimiter, terminator in heredocs:
                named = target if len(heredocs) == 1 else terminator  # `COPY <<a.sh <<b.sh /dir/`
                first = data[lines[number][0] : lines[number][1]] if number < len(lines) else b""
                shell = named.endswith(b".sh") or (first.startswith(b"#!") and _SHELL_SHEBANG.search(first))
                start, after = number, _heredoc(data, lines, number, terminator, view if shell else None)
                ended = after > start and data[slice(*lines[after - 1])].strip() == terminator
                if ended and (named.endswith(b".py") or (first.startswith(b"#!") and b"python" in first)):
                    written = (lines[start][0], lines[after - 1][0])
                    python.append(heredoc_file(data, *written, delimiter, tabs_stripped=b"<<-" in text))
                number = after
        elif keyword == b"ENV" or (keyword == b"ARG" and b"=" in text[body:]):
            view[start + body : end] = _env_assignments(text[body:])
        elif keyword == b"FROM":
            view[start:end] = text
    return bytes(view), python


def _heredoc(
    data: bytes,
    lines: list[tuple[int, int]],
    number: int,
    terminator: bytes,
    view: bytearray | None,
    keep_terminator: bool = False,
) -> int:
    """The heredoc's lines from line `number` up to its terminator, shown in `view` as they are
    (and the terminator where bash reads it, after a `RUN cmd <<EOT`); the line after it."""
    while number < len(lines):
        line_start, line_end = lines[number]
        number += 1
        if data[line_start:line_end].strip() == terminator:
            if view is not None and keep_terminator:
                view[line_start:line_end] = data[line_start:line_end]
            return number
        if view is not None:
            view[line_start:line_end] = data[line_start:line_end]
    return number


def _env_assignments(body: bytes) -> bytes:
    """`KEY=value ...` as it is; the legacy `KEY value` with the space after KEY read as `=`,
    and its value, which may hold spaces unquoted, blanked."""
    legacy = re.match(rb"([A-Za-z_][A-Za-z0-9_]*)([ \t]+)", body)
    if legacy and b"=" not in body[: legacy.end()]:
        return legacy[1] + b"=" + blanked(body[legacy.end(1) + 1 :])
    return body


def makefile_view(data: bytes) -> bytes:
    """Recipe lines (a tab first) as shell, make's `$$` read as the shell's `$` and its variable
    references `$(NAME)` as the shell's `${NAME}` (a variable renamed where it is set is renamed
    where it is read); variable assignments and `export NAME` lines as assignments, their values
    blanked but for the variables they read; rules, directives and comments blanked but for the
    variables they read or name (`ifdef NAME`, `$(origin NAME)`, read as `$NAME`); a `define
    NAME` ... `endef` block as the assignment of NAME, its lines (tab-led ones too) a value."""
    view = bytearray(blanked(data))
    defining = False
    for start, end in _logical_lines(data):
        text = data[start:end]
        if defining:
            defining = _ENDEF.match(text) is None
            _references(text, 0, start, view)
            continue
        if define := _DEFINE.match(text):
            defining = True
            view[start + define.start(1) : start + define.end(1) + 1] = define[1] + b"="
            continue
        prefix = _RECIPE_PREFIX.match(text)
        if prefix:
            shell = _MAKE_REFERENCE.sub(rb"${\1}", text[prefix.end() :])
            shell = _functions_as_words(shell).replace(b"$$", b" $")
            view[start + prefix.end() : end] = shell
            continue
        assignment = _MAKE_ASSIGNMENT.match(text)
        if assignment:
            name_start, name_end = assignment.span(2)
            view[start + name_start : start + name_end + 1] = text[name_start:name_end] + b"="
            _references(text, assignment.end(), start, view)
        elif text.startswith(b"export "):
            view[start:end] = text
        else:
            _references(text, 0, start, view)
    return bytes(view)


def _functions_as_words(recipe: bytes) -> bytes:
    """A recipe's make function calls (`$(if $(CI),--log "$(V).log",)`, `$(shell ...)`), which
    make replaces by their result before the shell runs, as one shell word: `_` for each byte but
    the variables they read (`${CI}`) and line continuations, so that bash reads a word where make
    writes one (`$(if` is no shell it could parse)."""
    kept = bytearray(len(recipe))
    for part in (*_SHELL_REFERENCE.finditer(recipe), *_CONTINUATION.finditer(recipe)):
        kept[part.start() : part.end()] = b"\x01" * len(part[0])
    view, end = bytearray(recipe), 0
    for call in _MAKE_FUNCTION.finditer(recipe):
        if call.start() < end:
            continue  # a call inside a call: already part of its word
        end = _call_end(recipe, call.start() + 1)
        for i in range(call.start(), end):
            if not kept[i]:
                view[i] = ord("_")
    return bytes(view)


def _call_end(text: bytes, opening: int) -> int:
    """Where the make call whose `(` or `{` is at `opening` ends: after its matching closer, or
    at the text's end when it has none."""
    opener = text[opening]
    closer = ord(")") if opener == ord("(") else ord("}")
    depth = 0
    for at in range(opening, len(text)):
        depth += (text[at] == opener) - (text[at] == closer)
        if depth == 0:
            return at + 1
    return len(text)


def _references(text: bytes, after: int, start: int, view: bytearray) -> None:
    """The variables a line of make reads or names from `after` on, written into the view as
    the shell's expansions, each at its place."""
    code = text.split(b"#")[0] if not _RECIPE_PREFIX.match(text) else text
    for reference in _MAKE_REFERENCE.finditer(code, after):
        at = start + reference.start()
        view[at : at + len(reference[0])] = b"${%s}" % reference[1]
    for named in _MAKE_NAMED.finditer(code, after):
        group = 1 if named[1] else 2
        at = start + named.start(group)
        view[at - 1 : at + len(named[group])] = b"$" + named[group]


def makefile_text(data: bytes, view: bytes) -> list[tuple[int, int]]:
    """The spans of a Makefile's text that its view blanks, short of its comments: what make
    does with a name spelled there (`$(filter NAME,...)`, a `$(shell ...)`) decides."""
    spans = []
    for start, end in _logical_lines(data):
        text = data[start:end]
        if _RECIPE_PREFIX.match(text):
            continue
        code_end = start + len(text.split(b"#")[0])
        for blank in re.finditer(rb"[ \n]+", view[start:code_end]):
            spans.append((start + blank.start(), start + blank.end()))
    return spans
