"""Shell launch scripts as the engine's rules see them: tree-sitter's bash grammar (a real shell
parser, not text substitution) finds where a script sets, exports or expands a variable and
which commands it runs; the `shell_env` and `shell_command` rules (engine/kinds/shell.py) match
there, and their fixes edit those exact bytes. Comments, quoting, heredoc bodies and every other
byte stay as they were; a rewrite that `bash -n` refuses is not written."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import replace
from functools import cache
from typing import Any

from npu_migrate.engine.index import RuleIndex
from npu_migrate.engine.sites import Site, match_sites, site_result
from npu_migrate.engine.suppressions import Suppressions
from npu_migrate.handlers.dependencies import Found, requirement_sites
from npu_migrate.handlers.embedded_python import Code, migrate_embedded, python_code
from npu_migrate.model import NO_MODULE, Applicability, FileResult, Hold, ModulePath

IN_TEXT = Hold(
    "spelled in text",
    "it is spelled in text (a quoted heredoc's body, an `eval` or `bash -c` string, a command's "
    "argument), which npu-migrate leaves as it is: what reads the text decides",
)
_NAME = re.compile(rb"\b[A-Za-z_][A-Za-z0-9_]*\b")
IN_COMMAND = Hold("installed by a script", "a script installs it: add to this command by hand")
PLAIN_ONLY = Hold(
    "a tool run with arguments",
    "it runs with arguments, whose meaning differs for the NPU's tool: port it by hand",
)
EXPANDED = Hold(
    "a word spelled with variables",
    "part of it is a variable's value, known only when the script runs: edit it by hand",
)


@cache
def _parser() -> Any:
    import tree_sitter_bash
    from tree_sitter import Language, Parser

    return Parser(Language(tree_sitter_bash.language()))


def migrate_shell(
    data: bytes, index: RuleIndex, enabled: frozenset[Applicability], where: ModulePath = NO_MODULE
) -> FileResult:
    return migrate_script(data, data, index, enabled)


def migrate_script(
    data: bytes,
    view: bytes,
    index: RuleIndex,
    enabled: frozenset[Applicability],
    suppressions: Suppressions | None = None,
    texts: Sequence[tuple[int, int]] = (),
    python_files: Sequence[Code] = (),
) -> FileResult:
    """A script's result. `view` is what bash parses: the file itself, or (a Dockerfile, a
    Makefile) the file with what is not shell blanked out, byte for byte at the same offsets.
    `suppressions`: the file's own (None: those in the script's comments, as bash reads them;
    a heredoc's body or a quoted argument holds none). `texts`: spans of the file that are text
    to it (a Makefile's function calls), where a name spelled is reported, never renamed.
    `python_files`: Python files the file writes, outside the view (a Dockerfile's COPY heredocs)."""
    tree = _parser().parse(_without_last_continuation(view))
    if (line := _unparsable(tree)) is not None:
        return FileResult(error=f"line {line}: not a script bash can parse")
    if suppressions is None:
        suppressions = Suppressions.in_comments(data, _comments(tree.root_node))
    installed = requirement_sites(list(_installs(tree.root_node, view)), IN_COMMAND)
    spelled = (site for start, end in texts for site in _spelled_in(data, start, end, read=True))
    sites = [*_sites(tree.root_node, view), *_flag_lists(tree.root_node, view), *spelled, *installed]
    python = migrate_embedded(data, python_code(tree.root_node, view), index, enabled)
    sites = [s for s in sites if not any(c.start <= s.start and s.end <= c.end for c in python.read)]
    sites = _held_where_sourced(tree.root_node, view, sites)
    matched = match_sites(data, sites, index, enabled, {"shell", "requirements"}, suppressions=suppressions)
    written = migrate_embedded(data, list(python_files), index, enabled)
    found = [*matched.findings, *python.findings, *written.findings]
    matched.findings = sorted(found, key=lambda f: (f.line, f.column))
    matched.edits.spans += python.spans
    if matched.edits.spans and (refused := _bash_refuses(matched.edits.apply(view))):
        if (unmigrated := _bash_refuses(view)) is not None:  # the input's fault, not the fixes'
            return FileResult(error=f"not a script bash can parse: {unmigrated}")
        return FileResult(
            error=f"the fixes would leave a script bash -n refuses: {refused}", tool_failed=True
        )
    matched.edits.spans += written.spans  # (no shell: not for bash -n)
    added = [*python.added_imports, *written.added_imports]
    return replace(site_result(matched, data, suppressions), added_imports=added)


def unparsable_line(view: bytes) -> int | None:
    """The first line of a script that bash's grammar cannot read, or None."""
    return _unparsable(_parser().parse(_without_last_continuation(view)))


def _unparsable(tree: Any) -> int | None:
    return _first_error(tree.root_node).start_point[0] + 1 if tree.root_node.has_error else None


def _without_last_continuation(view: bytes) -> bytes:
    r"""bash reads a last line that ends in `\` (then nothing, or a line break) as ending there;
    tree-sitter's grammar refuses it: the backslash is read as a space, so no offset moves."""
    end = len(view.rstrip(b"\r\n"))
    if end and view[end - 1 : end] == b"\\" and view[max(0, end - 2) : end] != b"\\\\":
        return view[: end - 1] + b" " + view[end:]
    return view


def _site(node: Any, data: bytes, kind: str, held: Hold | None = None) -> Site:
    text = data[node.start_byte : node.end_byte].decode(errors="replace")
    return Site(kind, node.start_byte, node.end_byte, text, held=held)


def _sites(node: Any, data: bytes, read: bool = True) -> Iterator[Site]:
    """Variable names where they are set, exported, expanded or named to a command that takes a
    variable's name (`read NAME`, `for NAME in`, `[[ -v NAME ]]`); pipelines; commands (their fix
    held when they run with arguments) and their literal arguments, in order. A name spelled in text (a
    quoted heredoc's body, an `eval` or `bash -c` string, any other word) is reported there but
    never renamed: what reads the text decides; where that text is written out (an `echo`'s
    message, a heredoc to `cat`: `read` False), the program does not read the name there.
    Nothing in a comment."""
    if node.type == "comment":
        return
    if node.type in _TEXT:
        yield from _mentions(node, data, read)
        return
    if node.type in ("variable_assignment", "simple_expansion", "expansion"):
        name = next((c for c in node.children if c.type == "variable_name"), None)
        if name is not None:
            yield _site(name, data, "variable")
        value = node.children[-1] if node.type == "variable_assignment" else None
        if value is not None and value is not name:  # a value is a word too (IMAGE=nvidia/cuda:12.1)
            yield from _word(value, data)
            yield from _sites(value, data)
        return
    if node.type in ("declaration_command", "unset_command", "for_statement"):  # `export NAME`
        yield from (_site(c, data, "variable") for c in node.children if c.type == "variable_name")
    elif node.type == "redirected_statement":  # `cat > job.env <<END`: the text is written out
        command = next((c for c in node.children if c.type == "command"), None)
        name = next((c for c in command.children if c.type == "command_name"), None) if command else None
        written = name is not None and _text(name, data) in _WRITERS
        for child in node.children:
            yield from _sites(child, data, read and not (written and child.type == "heredoc_redirect"))
        return
    elif node.type == "unary_expression" and _text(node.children[0], data) == "-v":  # [[ -v NAME ]]
        yield from (_site(c, data, "variable") for c in node.children[1:] if c.type == "word")
        return
    elif node.type == "command":
        name = next((c for c in node.children if c.type == "command_name"), None)
        if name is not None:
            arguments = [c for c in node.children if c.start_byte >= name.end_byte and c.type != "comment"]
            given = [a for a in arguments if not a.type.endswith("redirect")]
            yield _site(name, data, "command", held=PLAIN_ONLY if given else None)
            yield from _arguments(given, data)
            command = _text(name, data)
            named = set(_variables_named(command, given, data))
            yield from (_site(a, data, "variable") for a in given if a in named)
            said = command in _WRITERS and "-v" not in [_text(a, data) for a in given]
            for child in node.children:
                if child not in named:
                    yield from _sites(child, data, read and not said)
            return
    if node.type == "pipeline":  # `nvidia-smi -L | wc -l`: a pipeline, and the commands in it
        yield _site(node, data, "pipeline")
    if node.type == "array":  # `ARGS=(--distributed-backend nccl)`: a command's arguments, later
        yield from _arguments([c for c in node.children if c.type not in ("(", ")", "comment")], data)
    for child in node.children:
        yield from _sites(child, data, read)


_READ_SCRIPTS = (".sh", ".bash")  # a file sourced by a relative name with these is read by the run too


def _held_where_sourced(root: Any, data: bytes, sites: list[Site]) -> list[Site]:
    """The sites, each read of a variable the script does not set itself held after it sources
    a file the run does not read (`source cluster.env`, `. /etc/profile.d/cuda.sh`, a computed
    name): that file may set the variable, and renaming the read alone reads what nothing sets."""
    sourced = [
        (command.start_byte, _text(arguments[0], data))
        for command in _walk(root)
        if command.type == "command"
        and (name := next((c for c in command.children if c.type == "command_name"), None)) is not None
        and _text(name, data) in ("source", ".")
        and (arguments := [c for c in command.children if c.start_byte >= name.end_byte])
        and not (
            arguments[0].type == "word"
            and _text(arguments[0], data).endswith(_READ_SCRIPTS)
            and not _text(arguments[0], data).startswith(("/", "~"))
        )
    ]
    if not sourced:
        return sites
    set_here = {
        _text(name, data)
        for node in _walk(root)
        if node.type == "variable_assignment"
        for name in node.children[:1]
        if name.type == "variable_name"
    }
    reads = {
        name.start_byte
        for node in _walk(root)
        if node.type in ("simple_expansion", "expansion")
        for name in node.children
        if name.type == "variable_name" and _text(name, data) not in set_here
    }
    first, file = min(sourced)
    held = Hold(
        "set by a file the run does not read",
        f"`{file[:80]}`, which this script sources and npu-migrate does not read, may set it: "
        "rename it there and here together",
    )
    return [
        replace(site, held=held)
        if site.kind == "variable" and site.start in reads and site.start > first
        else site
        for site in sites
    ]


def _flag_lists(root: Any, data: bytes) -> Iterator[Site]:
    """The words of a quoted value assigned to a variable that a command is given unquoted
    (`ARGS="--bf16 --optim adamw_apex_fused"`, then `torchrun train.py $ARGS`): the shell splits
    that value into the command's arguments, so each of its literal words is an argument too; and
    so are the words of a variable expanded in such a value (`CMD="python train.py ${ARGS}"`, then
    `eval $CMD`: Megatron's retro scripts). A word that touches an expansion or holds a backslash
    is left out: its value is not its text."""
    values: dict[str, list[Any]] = {}
    for node in _walk(root):
        name = next((c for c in node.children if c.type == "variable_name"), None)
        if node.type == "variable_assignment" and name is not None and node.children[-1].type == "string":
            values.setdefault(_text(name, data), []).append(node.children[-1])
    split = {name for node in _walk(root) if node.type == "command" for name in _unquoted_names(node, data)}
    todo = list(split)
    while todo:  # a value split into arguments splits the values expanded in it
        for value in values.get(todo.pop(), ()):
            for inner in _unquoted_names(value, data):
                if inner not in split:
                    split.add(inner)
                    todo.append(inner)
    for name, strings in values.items():
        if name in split:
            for value in strings:
                yield from _split_words(value, data)


def _split_words(value: Any, data: bytes) -> Iterator[Site]:
    """Word sites for the literal words of a quoted value the shell splits into arguments."""
    for content in (c for c in value.children if c.type == "string_content"):
        words = list(re.finditer(rb"\S+", data[content.start_byte : content.end_byte]))
        if len(words) < 2 and _literal(value) is not None:
            continue  # the whole value is one word, and a word site already
        before = ""
        for word in words:
            start, end = content.start_byte + word.start(), content.start_byte + word.end()
            touches = (start == content.start_byte and _expanded(content.prev_sibling)) or (
                end == content.end_byte and _expanded(content.next_sibling)
            )
            text = word[0].decode(errors="replace")
            if not touches and b"\\" not in word[0]:
                yield Site("word", start, end, text, facts={"after": before})
            before = text


def _expanded(beside: Any) -> bool:
    """Whether the node beside a string's text is an expansion (not the quote, nor nothing)."""
    return beside is not None and beside.type != '"'


def _unquoted_names(command: Any, data: bytes) -> Iterator[str]:
    """The variables a command is given as whole unquoted arguments (`$ARGS`, `${ARGS}`)."""
    for child in command.children:
        if child.type in ("simple_expansion", "expansion") and len(child.children) <= 4:
            name = next((c for c in child.children if c.type == "variable_name"), None)
            if name is not None:
                yield _text(name, data)


def _walk(root: Any) -> Iterator[Any]:
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children)


_WRITERS = {"echo", "printf", "cat", "tee"}  # the text they are given is written out, not run
_TEXT = {"word", "string_content", "raw_string", "ansi_c_string", "heredoc_content", "heredoc_body"}
_NAMES_TAKEN = {"read": "dinNptu", "mapfile": "dnOstuCc", "readarray": "dnOstuCc", "printenv": ""}


def _variables_named(command: str, arguments: list[Any], data: bytes) -> Iterator[Any]:
    """The arguments that name a variable: `read`'s and `mapfile`'s names (not their options'
    values), `printenv`'s, and the name after `printf -v` or `env -u`."""
    valued = _NAMES_TAKEN.get(command)
    after = ""
    for argument in arguments:
        text = _text(argument, data) if argument.type == "word" else ""
        if (valued is not None and text.isidentifier() and not after) or (
            (command, after) in (("printf", "-v"), ("env", "-u")) and text.isidentifier()
        ):
            yield argument
        flag = text[1:] if text.startswith("-") and len(text) == 2 else ""
        after = text if flag and (valued is None or flag in valued) else ""


def _mentions(node: Any, data: bytes, read: bool) -> Iterator[Site]:
    """Each name spelled in a text node, outside the expansions in it (an unquoted heredoc's
    `$NAME` is the shell's own, and renamed as any other)."""
    at = node.start_byte
    for child in [*node.children, None]:
        yield from _spelled_in(data, at, child.start_byte if child is not None else node.end_byte, read)
        if child is not None:
            yield from _sites(child, data, read)
            at = child.end_byte


def _spelled_in(data: bytes, start: int, end: int, read: bool) -> Iterator[Site]:
    """A site, held, for each name spelled in the text between start and end."""
    for spelled in _NAME.finditer(data, start, end):
        text = spelled[0].decode(errors="replace")
        yield Site("variable", spelled.start(), spelled.end(), text, held=IN_TEXT, read=read)


def _text(node: Any, data: bytes) -> str:
    return data[node.start_byte : node.end_byte].decode(errors="replace")


def _arguments(nodes: list[Any], data: bytes) -> Iterator[Site]:
    """Word sites for arguments in the order a command gets them, each knowing the literal
    argument before it (the flag whose value it may be)."""
    before = ""
    for node in nodes:
        yield from _word(node, data, after=before)
        before = (_spelled(node, data) or (0, 0, ""))[2]


def _word(node: Any, data: bytes, after: str = "") -> Iterator[Site]:
    """A word site for an argument or value whose text is literal (see _spelled); one spelled
    with variables (`pytorch/pytorch:${PYTORCH}-cuda${CUDA}-devel`) is matched as written, its
    fix held. `after`: the literal argument before it (the flag whose value it may be)."""
    spelled = _spelled(node, data)
    if spelled is not None:
        yield Site("word", *spelled, facts={"after": after})
    elif node.type == "concatenation":
        yield _site(node, data, "word", held=EXPANDED)


_INSTALLERS = (
    ("pip", "install"),
    ("pip3", "install"),
    ("uv", "pip", "install"),
    ("conda", "install"),
    ("mamba", "install"),
    ("micromamba", "install"),
)
_PYTHON_PIP = ("-m", "pip", "install")
_INDEX_OPTIONS = {"-i", "--index-url", "--extra-index-url", "-f", "--find-links", "-c", "--channel"}
_FILE_OPTIONS = {
    "-r",
    "--requirement",
    "-e",
    "--editable",
    "--constraint",
    "--file",
    "--prefix",
    "-p",
    "-n",
    "--name",
}


def _installs(node: Any, data: bytes) -> Iterator[Found]:
    """What `pip install` (`python -m pip`, `uv pip`) and `conda install` commands install: each
    requirement or conda spec, and each index or channel they name, where its text is."""
    if node.type == "command":
        named = [c for c in node.children if c.type != "variable_assignment"]  # A=1 pip install ...
        words = [_spelled(c, data) for c in named if c.type != "comment" and not c.type.endswith("redirect")]
        names = [w[2] if w else "" for w in words]
        tail = next((len(i) for i in _INSTALLERS if tuple(names[: len(i)]) == i), None)
        if tail is None and names[:1] and names[0].startswith("python") and tuple(names[1:4]) == _PYTHON_PIP:
            tail = 4
        if tail is not None:
            conda = names[0] in ("conda", "mamba", "micromamba")
            yield from _install_arguments(words[tail:], conda)
    for child in node.children:
        yield from _installs(child, data)


def _install_arguments(words: list[tuple[int, int, str] | None], conda: bool) -> Iterator[Found]:
    after = ""  # the option the previous word was
    for word in words:
        if word is None:
            after = ""
            continue
        start, _, text = word
        option, equals, value = text.partition("=")
        if after in _INDEX_OPTIONS:
            yield Found(start, text, "index")
        elif text.startswith("-") and equals and option in _INDEX_OPTIONS:
            yield Found(start + len(option.encode()) + 1, value, "index")
        elif not text.startswith("-") and after not in _FILE_OPTIONS and not text.startswith((".", "/")):
            yield Found(start, text, "conda" if conda else "requirement")
        after = text if text.startswith("-") and not equals else ""


def _spelled(node: Any, data: bytes) -> tuple[int, int, str] | None:
    """An argument's literal text and where it is: a word, the content of a double-quoted string
    that holds nothing else (no expansion), or what is between single quotes; None otherwise."""
    if node.type == "command_name":
        node = node.children[0]
    if node.type == "raw_string":
        start, end = node.start_byte + 1, node.end_byte - 1
    else:
        inner = _literal(node)
        if inner is None:
            return None
        start, end = inner.start_byte, inner.end_byte
    return start, end, data[start:end].decode(errors="replace")


def _literal(argument: Any) -> Any:
    """The node of an argument's literal text: a word, or a double-quoted string's content when
    that is all it holds."""
    if argument.type == "word":
        return argument
    if argument.type == "string":
        inside = [c for c in argument.children if c.type != '"']
        return inside[0] if len(inside) == 1 and inside[0].type == "string_content" else None
    return None


def _comments(root: Any) -> Iterator[tuple[int, int]]:
    """The byte spans of the script's comments."""
    return ((node.start_byte, node.end_byte) for node in _walk(root) if node.type == "comment")


def _first_error(node: Any) -> Any:
    for child in node.children:
        if child.has_error:
            return _first_error(child) if child.type != "ERROR" else child
    return node


def _bash_refuses(script: bytes) -> str | None:
    """What `bash -n` says of the script, or None when it accepts it (or there is no bash)."""
    bash = shutil.which("bash")
    if bash is None:
        return None
    done = subprocess.run([bash, "-n"], input=script, capture_output=True, check=False)
    return done.stderr.decode(errors="replace").strip().splitlines()[0] if done.returncode else None
