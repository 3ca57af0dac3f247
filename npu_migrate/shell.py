"""Shell launch scripts as the engine's rules see them: tree-sitter's bash grammar (a real shell
parser, not text substitution) finds where a script sets, exports or expands a variable and
which commands it runs; the `shell_env` and `shell_command` rules (engine/kinds/shell.py) match
there, and their fixes edit those exact bytes. Comments, quoting, heredoc bodies and every other
byte stay as they were; a rewrite that `bash -n` refuses is not written."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from npu_migrate.engine.fixes import substituted
from npu_migrate.engine.index import RuleIndex
from npu_migrate.engine.kinds.shell import ShellCommandMatch, ShellEnvMatch, ShellWordMatch
from npu_migrate.model import NO_MODULE, Applicability, FileResult, Finding, ModulePath
from npu_migrate.rules.regex import compile_rule_regex

if TYPE_CHECKING:
    from npu_migrate.rules.schema import Rule

SHELL_MATCHES = (ShellEnvMatch, ShellWordMatch, ShellCommandMatch)
_regex = cache(compile_rule_regex)  # each rule's, compiled once, not at every site of every script
IN_TEXT = "it is in a heredoc's text, which npu-migrate leaves as it is: what reads the text decides"
_NAME = re.compile(rb"\b[A-Za-z_][A-Za-z0-9_]*\b")
PLAIN_ONLY = "it runs with arguments, whose meaning differs for the NPU's tool: port it by hand"


@dataclass(frozen=True)
class _Site:
    kind: str  # "variable" (a name set, exported or expanded), "word" (an argument) or "command"
    node: Any  # the tree-sitter node of the name
    text: str
    arguments: int = 0  # a command's
    in_text: bool = False  # spelled in a heredoc's text: reported, never fixed


class _Span:
    """Where a name in a heredoc's text is, as a tree-sitter node would say."""

    def __init__(self, body: Any, text: bytes, start: int, end: int) -> None:
        line_start = text.rfind(b"\n", 0, start) + 1
        line = body.start_point[0] + text.count(b"\n", 0, start)
        column = start - line_start + (body.start_point[1] if line_start == 0 else 0)
        self.start_byte, self.end_byte = body.start_byte + start, body.start_byte + end
        self.start_point, self.end_point = (line, column), (line, column + end - start)


@cache
def _parser() -> Any:
    import tree_sitter_bash
    from tree_sitter import Language, Parser

    return Parser(Language(tree_sitter_bash.language()))


def migrate_shell(
    data: bytes, index: RuleIndex, enabled: frozenset[Applicability], where: ModulePath = NO_MODULE
) -> FileResult:
    tree = _parser().parse(data)
    if tree.root_node.has_error:
        line = _first_error(tree.root_node).start_point[0] + 1
        return FileResult(error=f"line {line}: not a script bash can parse")
    rules = [r for r in index.rules if isinstance(r.match, SHELL_MATCHES)]
    findings: list[Finding] = []
    edits: list[tuple[int, int, bytes]] = []
    for site in _sites(tree.root_node, data):
        matching = [r for r in rules if _matches(r, site)]
        if not matching:
            continue
        rule = _winner(matching)
        held = IN_TEXT if rule.fix and site.in_text else None
        held = held or (PLAIN_ONLY if rule.fix and site.kind == "command" and site.arguments else None)
        fixed = None if held else _fixed(rule, site)
        applied = fixed is not None and rule.applicability in enabled
        node = site.node
        findings.append(
            Finding(
                rule=rule.info,
                line=node.start_point[0] + 1,
                column=node.start_point[1] + 1,
                end_line=node.end_point[0] + 1,
                end_column=node.end_point[1] + 1,
                code=site.text,
                replacement=fixed,
                applied=applied,
                held=held,
            )
        )
        if applied and fixed is not None:
            edits.append((node.start_byte, node.end_byte, fixed.encode()))
    result = FileResult(findings=sorted(findings, key=lambda f: (f.line, f.column, f.rule.code)))
    if edits:
        new = data
        for start, end, text in sorted(edits, reverse=True):
            new = new[:start] + text + new[end:]
        refused = _bash_refuses(new)
        if refused:
            return FileResult(error=f"the fixes would leave a script bash -n refuses: {refused}")
        result.new_source = new
    return result


def _winner(matching: list[Rule]) -> Rule:
    """A user's rule before the catalog's, then one that supersedes the others."""
    ranked = sorted(matching, key=lambda r: r.builtin)
    beaten = {code for r in ranked for code in r.supersedes}
    return next((r for r in ranked if r.code not in beaten), ranked[0])


def _matches(rule: Rule, site: _Site) -> bool:
    match = rule.match
    if isinstance(match, ShellEnvMatch):
        return site.kind == "variable" and bool(_regex(match.shell_env).fullmatch(site.text))
    if isinstance(match, ShellWordMatch):
        return site.kind == "word" and bool(_regex(match.shell_word).fullmatch(site.text))
    if isinstance(match, ShellCommandMatch):
        return site.kind == "command" and site.text == match.shell_command
    return False


def _fixed(rule: Rule, site: _Site) -> str | None:
    if rule.fix is None:
        return None
    if rule.fix.substitute:
        return substituted(site.text, rule.fix.substitute)
    return rule.fix.template


def _sites(node: Any, data: bytes) -> Iterator[_Site]:
    """Variable names where they are set, exported or expanded, and commands with their argument
    counts, in order; in a heredoc's body (text, which what reads it interprets), the names it
    spells, reported but never fixed; nothing in a comment."""
    if node.type == "comment":
        return
    if node.type == "heredoc_body":
        body = data[node.start_byte : node.end_byte]
        for spelled in _NAME.finditer(body):
            span = _Span(node, body, spelled.start(), spelled.end())
            yield _Site("variable", span, spelled[0].decode(errors="replace"), in_text=True)
        return
    if node.type in ("variable_assignment", "simple_expansion", "expansion"):
        name = next((c for c in node.children if c.type == "variable_name"), None)
        if name is not None:
            yield _Site("variable", name, data[name.start_byte : name.end_byte].decode(errors="replace"))
    elif node.type == "command":
        name = next((c for c in node.children if c.type == "command_name"), None)
        if name is not None:
            arguments = [c for c in node.children if c.start_byte >= name.end_byte and c.type != "comment"]
            text = data[name.start_byte : name.end_byte].decode(errors="replace")
            given = [a for a in arguments if not a.type.endswith("redirect")]
            yield _Site("command", name, text, len(given))
            for argument in given:  # a word, or a double-quoted string's only, literal content
                inner = _literal(argument)
                if inner is not None:
                    literal = data[inner.start_byte : inner.end_byte].decode(errors="replace")
                    yield _Site("word", inner, literal)
    for child in node.children:
        yield from _sites(child, data)


def _literal(argument: Any) -> Any:
    """The node of an argument's literal text: a word, or a double-quoted string's content when
    that is all it holds (single-quoted strings are left alone: a raw string's text has no node
    of its own)."""
    if argument.type == "word":
        return argument
    if argument.type == "string":
        inside = [c for c in argument.children if c.type != '"']
        return inside[0] if len(inside) == 1 and inside[0].type == "string_content" else None
    return None


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
