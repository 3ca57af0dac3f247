"""Jupyter notebooks as the engine sees them: the code cells, in order, as one module (so that
an import in the first cell resolves a call in the fifth), each cell behind a marker line; IPython
magics stand in as Python that does what they do (`!nvidia-smi` runs a shell through subprocess,
and so is a finding; a `%%` cell is another language and is left out). Findings come back located by cell and
line; a rewrite goes back into the cells' sources, the JSON layout, metadata and outputs as they
were, or not at all where the layout cannot be reproduced byte for byte."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from npu_migrate.discover import printable
from npu_migrate.engine.index import RuleIndex
from npu_migrate.handlers.notebook_shell import migrate_magics, shell_view
from npu_migrate.model import NO_MODULE, Applicability, FileResult, Finding, Hold, ModulePath

_CELL = "# <npu-migrate-cell {}>"
_CELL_LINE = re.compile(r"^# <npu-migrate-cell (\d+)>\r?\n?$")
_MAGIC = "  # <npu-migrate-magic {}>"
_MAGIC_LINE = re.compile(r"# <npu-migrate-magic (\d+)>")
_ERROR_LINE = re.compile(r"\bline (\d+)")
# `!cmd` runs a shell: the stand-in calls subprocess through a name bound by a hidden import, so
# that the rules on what Python runs in a shell (nvidia-smi) see it
_SHELL = "_npu_migrate_shell"
_SHELL_IMPORT = f"import subprocess as {_SHELL}  # <npu-migrate-shell>\n"
LAYOUT = Hold(
    "a notebook's layout",
    "the notebook's JSON layout cannot be written back byte for byte; re-save it in Jupyter",
)


def migrate_notebook(
    data: bytes, index: RuleIndex, enabled: frozenset[Applicability], where: ModulePath = NO_MODULE
) -> FileResult:
    from npu_migrate.engine.source import migrate_source

    try:
        notebook = _notebook(data)
    except NotANotebook as exc:
        return FileResult(error=f"not a notebook: {exc}")
    if (language := _language(notebook)) is not None:
        return FileResult(skipped=f"a notebook in {printable(language)}, not Python")
    cells = notebook["cells"]
    code, starts, magics, views = _module(cells)
    if not starts:
        return FileResult()
    result = migrate_source(code.encode("utf-8"), index, enabled, NO_MODULE)
    if result.error:
        return replace(result, error=_ERROR_LINE.sub(lambda m: _where(starts, int(m[1])), result.error))
    shell = migrate_magics(magics, views, index, enabled)
    if shell.error:
        return FileResult(error=f"its shell lines: {shell.error}", tool_failed=True)
    in_cell = _relocator(code, starts, magics)
    magic_lines = _magic_lines(code)
    python = [f for f in result.findings if magic_lines.get(f.line) not in shell.read]  # bash read those
    by_line = {k + 1: line for line, k in magic_lines.items()}
    in_shell = [_in_cell(f, by_line, starts) for f in shell.findings]
    result.findings = sorted(
        [*map(in_cell, python), *in_shell], key=lambda f: (f.cell or 0, f.line, f.column)
    )
    result.unused_suppressions = [_cell_line(starts, n)[1] for n in result.unused_suppressions]
    if not result.findings:
        return result
    result.added_imports = [(_cell_line(starts, n)[1], m) for n, m in result.added_imports]
    result.added_helpers = [(_cell_line(starts, n)[1], m) for n, m in result.added_helpers]
    result.removed_imports = [(_cell_line(starts, n)[1], m) for n, m in result.removed_imports]
    layout = _layout(data, notebook)
    if layout is None:  # a scan says so too: what apply would do
        held = [
            replace(f, applied=False, replacement=None, held=LAYOUT) if f.replacement is not None else f
            for f in result.findings
        ]
        return replace(result, findings=held, new_source=None, added_imports=[], added_helpers=[])
    if result.new_source is None and shell.rewritten is None:
        return result
    new_code = result.new_source.decode("utf-8") if result.new_source is not None else code
    _put_back(cells, new_code, shell.rewritten or magics)
    result.new_source = _dump(notebook, *layout)
    return result


def _magic_lines(code: str) -> dict[int, int]:
    """{line of the module: the index of the magic line standing in there}."""
    found = (_MAGIC_LINE.search(line) for line in code.splitlines())
    return {number: int(magic[1]) for number, magic in enumerate(found, 1) if magic}


def _in_cell(f: Finding, module_line: dict[int, int], starts: dict[int, int]) -> Finding:
    """A finding of the notebook's shell (its line: the magic's index, from 1) in its cell."""
    cell, line = _cell_line(starts, module_line[f.line])
    return replace(f, cell=cell + 1, line=line, end_line=_cell_line(starts, module_line[f.end_line])[1])


class NotANotebook(Exception):
    """The file is not a notebook as nbformat lays one out; the message says where, in a line."""


def _language(notebook: dict[str, Any]) -> str | None:
    """The language a notebook's kernel runs where it is not Python (an R or Julia notebook's
    code is no Python to read or rewrite), from its metadata; None for Python, or where the
    notebook does not say."""
    metadata = notebook.get("metadata")
    if not isinstance(metadata, dict):
        return None
    named = [
        table.get(key)
        for table, key in ((metadata.get("language_info"), "name"), (metadata.get("kernelspec"), "language"))
        if isinstance(table, dict)
    ]
    language = next((name for name in named if isinstance(name, str) and name.strip()), None)
    return None if language is None or language.strip().lower() in ("python", "python3") else language.strip()


def _notebook(data: bytes) -> dict[str, Any]:
    """The notebook, checked as far as the handler reads it: a mapping whose `cells` is a list of
    mappings, a code cell's source a string or a list of strings."""
    try:
        notebook = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise NotANotebook(f"cannot decode as utf-8: {exc.reason}") from None
    except ValueError as exc:
        raise NotANotebook(f"not JSON: {exc}") from None
    except RecursionError:
        raise NotANotebook("nested too deeply to parse") from None
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if not isinstance(cells, list):
        raise NotANotebook("no list of cells")
    for number, cell in enumerate(cells, 1):
        if not isinstance(cell, dict):
            raise NotANotebook(f"cell {number} is not a mapping")
        source = cell.get("source")
        if cell.get("cell_type") == "code" and not (
            source is None
            or isinstance(source, str)
            or (isinstance(source, list) and all(isinstance(s, str) for s in source))
        ):
            raise NotANotebook(f"cell {number}: its source is neither text nor a list of lines")
    return notebook


def cell_lines(data: bytes) -> list[tuple[int, int, str]]:
    """Each line of the notebook's code cells: (its cell, counted from 1 as findings count them,
    its line in the cell, its text). NotANotebook where it is none."""
    return [
        (number, line, text)
        for number, cell in enumerate(_notebook(data)["cells"], 1)
        if cell.get("cell_type") == "code"
        for line, text in enumerate("".join(cell.get("source") or []).splitlines(), 1)
    ]


def python_of(data: bytes) -> tuple[bytes, Callable[[Finding], Finding]] | None:
    """A notebook's code cells as one Python module, and what moves a finding in that module to
    its cell and line (None: not a notebook, or no code)."""
    try:
        cells = _notebook(data)["cells"]
    except NotANotebook:
        return None
    code, starts, magics, _ = _module(cells)
    return (code.encode("utf-8"), _relocator(code, starts, magics)) if starts else None


def _relocator(code: str, starts: dict[int, int], magics: list[str]) -> Callable[[Finding], Finding]:
    virtual = code.splitlines()

    def in_cell(f: Finding) -> Finding:
        cell, line = _cell_line(starts, f.line)
        magic = _MAGIC_LINE.search(virtual[f.line - 1])
        if magic is None:
            return replace(f, cell=cell + 1, line=line, end_line=f.end_line - (f.line - line))
        original = magics[int(magic[1])].rstrip("\r\n")  # the stand-in's columns mean nothing here
        start = len(original) - len(original.lstrip()) + 1
        return replace(
            f, cell=cell + 1, line=line, end_line=line, column=start, end_column=len(original) + 1,
            code=original.strip(),
        )  # fmt: skip

    return in_cell


def _module(cells: list[dict[str, Any]]) -> tuple[str, dict[int, int], list[str], list[bytes]]:
    """The code cells as one module; {cell index: the line of its marker}; the magic lines, and
    each as bash reads what IPython runs of it."""
    lines: list[str] = []
    starts: dict[int, int] = {}
    magics: list[str] = []
    views: list[bytes] = []
    for number, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        source = "".join(cell.get("source") or [])
        body = _cell_magic(source)
        if body is None:  # a cell in another language (%%html, %%writefile ...)
            continue
        starts[number] = len(lines) + 1
        lines.append(_CELL.format(number) + "\n")
        continued: str | None = None  # the indent of a magic line ending in `\`, for its next lines
        for index, line in enumerate(source.splitlines(keepends=True)):
            stripped = line.lstrip()
            shell = (body == "shell" and index > 0 and stripped.strip()) or continued is not None
            if shell or stripped.startswith(("!", "%")):
                indent = line[: len(line) - len(stripped)] if continued is None else continued
                call = _as_python(("!" if shell else "") + stripped.rstrip("\r\n"))
                lines.append(indent + call + _MAGIC.format(len(magics)) + "\n")
                magics.append(line)
                views.append(shell_view(line, bool(shell)))
                continued = indent if stripped.rstrip("\r\n").endswith("\\") else None
            else:
                lines.append(line if line.endswith(("\n", "\r")) else line + "\n")
    if any(m.lstrip().startswith("!") for m in magics):
        first = min(starts.values())  # the line of the first marker; the import goes after it
        lines.insert(first, _SHELL_IMPORT)
        starts = {
            cell: start + (start >= first) for cell, start in starts.items()
        }  # the first: at the import
    return "".join(lines), starts, magics, views


SHELL_CELLS = frozenset({"bash", "sh", "script", "system"})  # a %%bash cell's lines run in a shell
PYTHON_CELLS = frozenset({"time", "timeit", "capture", "prun", "debug"})  # these run Python


def _cell_magic(source: str) -> str | None:
    """What a cell's body is: "python" (no cell magic, or one that runs Python), "shell", or
    None for another language."""
    if not source.lstrip().startswith("%%"):
        return "python"
    name = source.lstrip()[2:].split(maxsplit=1)[0] if source.lstrip()[2:].strip() else ""
    return "shell" if name in SHELL_CELLS else "python" if name in PYTHON_CELLS else None


def _as_python(magic: str) -> str:
    """What IPython runs for a magic line: `!cmd` is a system call, `%name args` a line magic."""
    if magic.startswith("!"):
        return f"{_SHELL}.run({magic[1:]!r}, shell=True)"
    name, _, args = magic.lstrip("%").partition(" ")
    return f"get_ipython().run_line_magic({name!r}, {args!r})"


def _cell_line(starts: dict[int, int], line: int) -> tuple[int, int]:
    """(cell index, line in the cell) of a line of the module."""
    cell = max(
        (c for c, start in starts.items() if start < line), default=min(starts), key=lambda c: starts[c]
    )
    return cell, line - starts[cell]


def _where(starts: dict[int, int], line: int) -> str:
    cell, in_cell = _cell_line(starts, line)
    return f"cell {cell + 1} line {in_cell}"


def _put_back(cells: list[dict[str, Any]], code: str, magics: list[str]) -> None:
    """The rewritten module's cells into the notebook's, magic lines restored as they were, each
    cell's source kept a list of lines or a string, as it was."""
    current: int | None = None
    sources: dict[int, list[str]] = {}
    for line in code.splitlines(keepends=True):
        marker = _CELL_LINE.match(line)
        if marker:
            current = int(marker[1])
            sources[current] = []
            continue
        magic = _MAGIC_LINE.search(line)
        if line == _SHELL_IMPORT:
            continue
        if current is not None:
            sources[current].append(magics[int(magic[1])] if magic else line)
    for number, lines in sources.items():
        cell = cells[number]
        original = cell.get("source") or []
        text = "".join(original)
        new = "".join(lines)
        if not text.endswith("\n") and new.endswith("\n"):
            new = new[:-1]  # the module's line break after the cell's last line
        cell["source"] = new if isinstance(original, str) else new.splitlines(keepends=True)


def _layout(data: bytes, notebook: dict[str, Any]) -> tuple[int | None, bool, str] | None:
    """The json.dumps settings that write this notebook back byte for byte, or None."""
    text = data.decode("utf-8")
    for indent in (1, 2, 4, None):
        for ascii_only in (False, True):
            end = text[len(text.rstrip("\n")) :]
            if _dump(notebook, indent, ascii_only, end) == data:
                return indent, ascii_only, end
    return None


def _dump(notebook: dict[str, Any], indent: int | None, ascii_only: bool, end: str) -> bytes:
    return (json.dumps(notebook, indent=indent, ensure_ascii=ascii_only) + end).encode("utf-8")
