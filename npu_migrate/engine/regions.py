"""Where in a file the rules can match, found without libcst.

Every match spells one of its rule's anchors: a name's last component or a local alias of it, a
method or attribute name, a string a string rule's regex starts. So only the statements around
the lines with an anchor need the concrete syntax tree, and the stdlib parser (about ten times
faster than libcst's) finds those statements: the innermost statement around each anchor line
(only the header of a compound statement, when the anchor is in its header; a `match` statement
whole), or the innermost function for rules that look at a whole function (whole-`def`
patterns, data flow), which at a script's top level is the whole module. What a guard decides
on is the program model's business (engine.program): it reads the whole file with the stdlib
parser, so the regions need not hold it.

The regions of a file, and all its import statements, are put together into one small module,
each region framed by `if 1:` when indented so that its lines keep their text and columns; the
engine parses and matches that module once and shifts the positions back."""

from __future__ import annotations

import ast
import bisect
import functools
import re
import textwrap
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import accumulate

from npu_migrate.engine.holds import names_npu
from npu_migrate.engine.names import ImportTable, ast_blocks
from npu_migrate.engine.regex import compile_rule_regex
from npu_migrate.model import NO_MODULE, ModulePath
from npu_migrate.prefilter import imports_fragment, top_level_definitions

NEWLINE = re.compile(r"\r\n|\r|\n")  # what Python's tokenizer, and so ast's line numbers, count
_OTHER_LINE_BREAKS = "\v\f\x1c\x1d\x1e\x85\u2028\u2029"  # where str.splitlines breaks and Python does not
_QUOTE = re.compile("[\"']")
_WINDOW = 1024
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


BlockTest = Callable[[list[ast.stmt]], bool]  # whether a block's statements may hold a match

# What may stand between the tokens of one expression: spaces, line breaks inside brackets,
# backslash continuations, comments. A comment runs to the end of its line (the lookahead): else
# a banner of `#`s splits into comments in exponentially many ways before a match fails.
_GAP = r"(?:\s|\\\r?\n|#[^\r\n]*(?![^\r\n]))*"
CALLED = _GAP + r"\("  # the name is called
ASSIGNED = _GAP + r"=(?!=)"  # the name is assigned to


@dataclass(frozen=True)
class Token:
    """Something a match spells: a word, a qualified-name pattern ('a.b.c', or 'a.b.*' for
    anything under a.b) which a file spells through its imports, or a regex that the text of a
    string literal starts with. `then`: a regex that follows the word or name (`(` of a call)."""

    # "word", "name", "regex", or "fragment": text inside a word (`_cuda`) that an imported
    # module's name holds; a file that spells it on an import line is read at its imports
    kind: str
    value: str
    then: str = ""

    @classmethod
    def word(cls, value: str, then: str = "") -> Token:
        return cls("word", value, then)

    @classmethod
    def name(cls, pattern: str, then: str = "") -> Token:
        return cls("name", pattern, then)

    @classmethod
    def regex(cls, value: str) -> Token:
        return cls("regex", value)

    @classmethod
    def fragment(cls, value: str) -> Token:
        return cls("fragment", value)


@dataclass(frozen=True)
class _Rule:
    alternatives: tuple[frozenset[Token], ...]
    function: bool
    whole: re.Pattern[str] | bool = False  # its matches read the whole file (where the text spells this)
    block: BlockTest | None = None  # see Anchors.rule
    only_at: tuple[type[ast.stmt], ...] = ()
    only_in_functions: bool = False


@dataclass
class Anchors:
    """What the match kinds say about their rules: every match spells at least one token of each
    of the rule's alternatives; per file, the alternative that file spells least often is used."""

    _rules: list[_Rule] = field(default_factory=list)
    _by_prefix: dict[str, set[str]] = field(default_factory=dict)  # every prefix -> name patterns
    _string_regexes: tuple[str, ...] = ()
    anywhere: bool = False  # some rule has no anchor: every file is parsed whole

    def rule(
        self,
        *alternatives: Iterable[Token],
        function: bool = False,
        whole: re.Pattern[str] | bool = False,
        block: BlockTest | None = None,
        only_at: tuple[type[ast.stmt], ...] = (),
        only_in_functions: bool = False,
    ) -> None:
        """One rule's anchors; `function`: its matches need their whole enclosing function;
        `whole`: the whole file, wherever it spells them (a move looked for through a script's
        names), or where the text also spells this regex (the `def` of a method a match reads
        from its class). For a function rule, `block`: a match lies in a block of statements
        that passes this test (a run of statements that may match), so a function with no such
        block around the anchor holds none; `only_at`: the function (or a script's top level,
        unless `only_in_functions`) is needed only where the anchor's statement is one of these
        types (else the statement is)."""
        choices = tuple(frozenset(a) for a in alternatives)
        if not choices or not all(choices):
            self.anywhere = True
            return
        self._rules.append(_Rule(choices, function, whole, block, only_at, only_in_functions))
        strings = {t.value for c in choices for t in c if t.kind == "regex"}
        self._string_regexes = tuple(sorted(strings | set(self._string_regexes)))
        for token in (token for choice in choices for token in choice):
            if token.kind == "name":
                parts = token.value.removesuffix(".*").split(".")
                for size in range(1, len(parts) + 1):
                    self._by_prefix.setdefault(".".join(parts[:size]), set()).add(token.value)

    def survey(self, text: str, counts: Counter[str]) -> Survey | None:
        """What a file may spell; None when no rule's anchors are in it at all (then no rule can
        match, and the file need not even be parsed by the stdlib). A name is spelled by its last
        component, or by a local alias, whose import spells that component: so a component that
        the text lacks rules the name out. `counts`: prefilter.word_counts of the text."""

        strings = self._strings(text)

        def may_spell(token: Token) -> bool:
            if token.kind == "regex":
                return token.value in strings
            if token.kind == "fragment":
                return imports_fragment(text, token.value)
            return counts[_last_word(token.value)] > 0

        rules = [r for r in self._rules if all(any(map(may_spell, c)) for c in r.alternatives)]
        return Survey(self, text, counts, strings, rules) if rules else None

    def _strings(self, text: str) -> dict[str, list[int]]:
        """For each string regex, where a literal starts with it. One search over the text says
        whether any does; from its quote on, each quote is tried with the text that follows it
        (RE2 pays for a whole text at every call, so the calls get a window: a literal is known
        by its first _WINDOW characters)."""
        regexes = self._string_regexes
        if not regexes:
            return {}
        any_quoted = compile_rule_regex("[\"'](?:" + "|".join(f"(?:{r})" for r in regexes) + ")")
        first = any_quoted.search(text)
        if first is None:
            return {}
        found: dict[str, list[int]] = {}
        for quote in _QUOTE.finditer(text, first.start()):
            window = text[quote.start() : quote.start() + _WINDOW]
            if not any_quoted.match(window):
                continue
            for regex in regexes:
                if compile_rule_regex(f"[\"'](?:{regex})").match(window):
                    found.setdefault(regex, []).append(quote.start())
        return found

    def spellings(self, bindings: Iterable[tuple[str, str]]) -> dict[str, list[list[str]]]:
        """For each name pattern, how this file writes it: a local name its imports bind to the
        name (or, for 'a.b.*', to a.b or under it), or such a local followed by the rest of the
        name, component by component."""
        spelled: dict[str, list[list[str]]] = {}
        for local, target in bindings:
            parts = target.split(".")
            for size in range(1, len(parts)):
                base = ".".join(parts[:size]) + ".*"
                if base in self._by_prefix.get(".".join(parts[:size]), ()):
                    spelled.setdefault(base, []).append([local])
            for pattern in self._by_prefix.get(target, ()):
                rest = pattern.removesuffix(".*")[len(target) + 1 :]
                spelled.setdefault(pattern, []).append([local, *rest.split(".")] if rest else [local])
        return spelled


@dataclass
class Survey:
    """The rules whose anchors a file may spell, and the words it spells how often."""

    anchors: Anchors
    text: str
    counts: Counter[str]
    strings: dict[str, list[int]]  # string regex -> where the literals that start with it are
    rules: list[_Rule]

    @property
    def whole(self) -> bool:
        """Whether a rule the file may spell reads the whole file: then it is parsed whole."""
        return any(
            rule.whole is True or (rule.whole and rule.whole.search(self.text) is not None)
            for rule in self.rules
        )

    def lines(
        self, bindings: Iterable[tuple[str, str]], starts: list[int]
    ) -> tuple[list[int], list[FunctionAnchor]]:
        """The lines with an anchor: for statement rules, and for function rules with the lines
        that spell each of the rule's other alternatives (its function must spell them all).
        Of each rule's alternatives, the one whose rarest words this file spells least often is
        used."""
        counts = self.counts
        spelled = self.anchors.spellings(bindings)

        def cost(choice: frozenset[Token]) -> int:
            return sum(
                counts[t.value]
                if t.kind == "word"
                else sum(min(counts[w] for w in chain) for chain in spelled.get(t.value, ()))
                for t in choice
                if t.kind not in ("regex", "fragment")
            )

        def regexes(choice: frozenset[Token]) -> set[tuple[str, str]]:
            """(regex, where it may start): "string" (a string regex, found by the survey),
            "head" (a chain head: no `.` reaches it), "word"."""
            found: set[tuple[str, str]] = set()
            for token in choice:
                if token.kind == "word" and counts[token.value]:
                    found.add((_chain([token.value], token.then), "word"))
                elif token.kind == "name":
                    then = "" if token.value.endswith(".*") else token.then
                    chains = [c for c in spelled.get(token.value, ()) if all(counts[w] for w in c)]
                    found.update((_chain(c, then), "head") for c in chains)
                elif token.kind == "regex":
                    found.add((token.value, "string"))
                elif token.kind == "fragment":
                    found.add((_chain(["import"], ""), "word"))
            return found

        def lines(regexes: set[tuple[str, str]]) -> list[int]:
            offsets: set[int] = set()
            for regex, where in regexes:
                if where == "string":
                    offsets.update(self.strings.get(regex, ()))
                else:
                    offsets.update(_starts(regex, where == "head", self.text))
            return sorted({bisect.bisect_right(starts, at) for at in offsets})

        statement_regexes: set[tuple[str, str]] = set()
        function_anchors: list[FunctionAnchor] = []
        for rule in self.rules:
            chosen = min(rule.alternatives, key=cost)
            if not rule.function:
                statement_regexes |= regexes(chosen)
                continue
            needs = tuple(lines(regexes(other)) for other in rule.alternatives if other is not chosen)
            function_anchors += [FunctionAnchor(line, needs, rule) for line in lines(regexes(chosen))]
        return lines(statement_regexes), sorted(function_anchors)


# A block around a line, with the index of its statement that holds the line.
Around = tuple[list[ast.stmt], int]


@dataclass(frozen=True, order=True)
class FunctionAnchor:
    """A line a function rule's anchor is on, and for each of the rule's other alternatives the
    lines that spell it: a function that holds the line but none of one alternative's lines
    cannot hold a match (a match lies in one function and spells every alternative). `rule`:
    whose anchor it is (its `block`, `only_at` and `only_in_functions`, as Anchors.rule has them)."""

    line: int
    needs: tuple[list[int], ...]
    rule: _Rule = field(compare=False)

    def met_in(self, first: int, last: int) -> bool:
        return all(any(first <= line <= last for line in need) for need in self.needs)

    def block_met(
        self, around: list[tuple[list[ast.stmt], int]], tested: dict[tuple[int, int], bool]
    ) -> bool:
        """Whether some block around the line (`around`: _blocks_around's) passes the rule's block
        test (if it has one); `tested`: (test, block) -> its outcome, for the other anchors in the
        same blocks."""
        test = self.rule.block
        if test is None:
            return True
        for block, _ in around:
            key = (id(test), id(block))
            if key not in tested:
                tested[key] = test(block)
            if tested[key]:
                return True
        return False


@functools.cache
def _last_word(name: str) -> str:
    """The word a dotted name pattern is spelled by at least (`torch.cuda.*` -> `cuda`)."""
    return name.removesuffix(".*").rsplit(".", 1)[-1]


def _chain(chain: list[str], then: str) -> str:
    """The regex of a dotted chain of words, whole words, followed by `then`."""
    return (_GAP + r"\." + _GAP).join(map(re.escape, chain)) + r"\b" + then


def _starts(regex: str, head: bool, text: str) -> Iterator[int]:
    """Where a regex matches at the start of a word (for the `head` of a chain, a word that no
    `.` reaches). The regexes start with a literal, the fastest search re has, so the word
    boundary before it is checked here."""
    stops = "_." if head else "_"
    for match in _compiled(regex).finditer(text):
        start = match.start()
        before = text[start - 1] if start else " "
        if not (before.isalnum() or before in stops):
            yield start


@functools.cache
def _compiled(regex: str) -> re.Pattern[str]:
    return re.compile(regex)


def import_bindings(
    text: str, lines: list[str], starts: list[int], where: ModulePath = NO_MODULE
) -> list[tuple[str, str]] | None:
    """Every (local, qualified) binding the file's imports may make, without parsing the file:
    each line with the word `import` (and the lines its statement continues on) parsed alone.
    More than the file binds is harmless (a docstring's example: an anchor too many); None when
    a line cannot be read this way, so the caller parses the file. A module's own top-level
    definitions are bindings too (ImportTable.define)."""
    table = ImportTable(where)
    if table.where.name:
        table.define(top_level_definitions(text))
    done: set[int] = set()
    for at in _starts(r"import\b", False, text):  # the word, not inside a longer one (`reimport`)
        line = bisect.bisect_right(starts, at) - 1
        if line in done or lines[line].lstrip().startswith(("#", ">>>", "...")):
            continue  # a comment or a doctest: no statement starts here
        first = line
        while first and lines[first - 1].rstrip("\r\n").endswith("\\"):
            first -= 1
        if first == line and _one_line_import(lines[line], table):
            done.add(line)
            continue
        for last in range(line, min(line + _IMPORT_LINES, len(lines))):
            try:
                statement = "".join(lines[first : last + 1])
                tree = ast.parse(textwrap.dedent(statement) if statement[:1] in " \t" else statement)
            except SyntaxError:
                continue
            table.add_ast(ast.walk(tree))
            done.update(range(first, last + 1))
            break
        else:
            return None
    return table.bound


_IMPORT_LINES = 40  # an import statement (or the `try:` around it) longer than this: parse the file
_NAME = r"[^\W\d]\w*"
_AS = rf"{_NAME}(?:[ \t]+as[ \t]+{_NAME})?"
_DOTTED_AS = rf"{_NAME}(?:\.{_NAME})*(?:[ \t]+as[ \t]+{_NAME})?"
_END = r"[ \t]*(?:#[^\r\n]*)?\r?\n?"  # a comment, the line break
_PLAIN_IMPORT = re.compile(rf"[ \t]*import[ \t]+({_DOTTED_AS}(?:[ \t]*,[ \t]*{_DOTTED_AS})*){_END}")
_PLAIN_FROM = re.compile(
    rf"[ \t]*from[ \t]+(\.*)[ \t]*({_NAME}(?:\.{_NAME})*)?[ \t]+import[ \t]+"
    rf"({_AS}(?:[ \t]*,[ \t]*{_AS})*){_END}"
)


def _one_line_import(line: str, table: ImportTable) -> bool:
    """A line that is one plain import statement (`import a.b as c, d`, `from ..x import y as z`)
    read into `table` as its parse would be, without parsing it; False for any other line."""
    plain = _PLAIN_IMPORT.fullmatch(line)
    if plain is not None:
        for alias in plain[1].split(","):
            module, *asname = alias.split()  # `a.b` or `a.b as c`, as the pattern read it
            table.bind_module(module, asname[-1] if asname else None)
        return True
    found = _PLAIN_FROM.fullmatch(line)
    if found is None or (not found[1] and not found[2]):
        return False
    base = table.absolute(found[2] or "", len(found[1]))
    for alias in found[3].split(","):
        name, *asname = alias.split()
        if base:
            table.bind_from(base, name, asname[-1] if asname else None)
    return True


def line_starts(lines: list[str]) -> list[int]:
    """The offset at which each line starts (for bisect: a text offset to its line)."""
    return list(accumulate(map(len, lines), initial=0))


def byte_starts(source: bytes) -> list[int]:
    """The byte offset at which each line of a Python file starts, its lines counted as the
    stdlib's parser counts them (for byte_span)."""
    return line_starts(split_lines(source.decode("latin-1")))  # latin-1: one character per byte


def byte_span(node: ast.expr, starts: list[int]) -> tuple[int, int]:
    """Where a stdlib-parsed expression is in its file's bytes (its columns are UTF-8 bytes)."""
    assert node.end_lineno is not None and node.end_col_offset is not None
    return starts[node.lineno - 1] + node.col_offset, starts[node.end_lineno - 1] + node.end_col_offset


def split_lines(text: str) -> list[str]:
    """The lines of a source, each with its line break, as Python numbers them (str.splitlines
    also breaks at form feeds and other characters that Python does not count)."""
    if not any(other in text for other in _OTHER_LINE_BREAKS):  # most files: str's own split is Python's
        return text.splitlines(keepends=True)
    lines, start = [], 0
    for match in NEWLINE.finditer(text):
        lines.append(text[start : match.end()])
        start = match.end()
    if start < len(text):
        lines.append(text[start:])
    return lines


# ---------------------------------------------------------------------------- regions


@dataclass(frozen=True)
class Region:
    first: int  # 1-based, inclusive, with the comment and blank lines right above it
    last: int
    header_only: bool = False  # a compound statement's header, its body replaced by `pass`


def regions(
    tree: ast.Module, lines: list[str], statement_lines: list[int], function_anchors: list[FunctionAnchor]
) -> list[Region]:
    """The regions around the anchor lines, outermost only, in file order."""
    found: set[tuple[int, int, bool]] = set()
    tested: dict[tuple[int, int], bool] = {}
    for line in statement_lines:
        found.add(_around(tree.body, line, lines, None) or (0, 0, False))
    for anchor in function_anchors:
        around = list(_blocks_around(tree.body, anchor.line))
        in_a_function = any(isinstance(block[at], _FUNCTIONS) for block, at in around)
        innermost = around[-1][0][around[-1][1]] if around else None
        rule = anchor.rule
        if rule.only_at and not (
            isinstance(innermost, rule.only_at) and (in_a_function or not rule.only_in_functions)
        ):
            found.add(_around(tree.body, anchor.line, lines, None) or (0, 0, False))
        elif not anchor.block_met(around, tested):
            continue
        elif in_a_function:
            span = _around(tree.body, anchor.line, lines, (0, 0))
            if span is not None and anchor.met_in(span[0], span[1]):
                found.add(span)
        elif tree.body:  # a script's top level: its data flow runs through the whole module
            found.add((_span(tree.body[0])[0], _span(tree.body[-1])[1], False))
    kept: list[tuple[int, int, bool]] = []
    for first, last, header in sorted(found - {(0, 0, False)}, key=lambda s: (s[0], -s[1], s[2])):
        if not kept or first > kept[-1][1]:  # else inside the region before it (statements nest)
            kept.append((first, last, header))
    return [Region(_with_leading_comments(lines, first), last, header) for first, last, header in kept]


def _blocks_around(body: list[ast.stmt], line: int) -> Iterator[Around]:
    """Each block around `line`, outermost first, with the index of its statement that holds it."""
    for at, statement in enumerate(body):
        first, last = _span(statement)
        if first <= line <= last:
            yield body, at
            for block in ast_blocks(statement):
                yield from _blocks_around(block, line)
            return


def _span(node: ast.stmt) -> tuple[int, int]:
    decorators = getattr(node, "decorator_list", [])
    first = min([node.lineno, *(d.lineno for d in decorators)])
    return first, node.end_lineno or node.lineno


def _around(
    body: list[ast.stmt], line: int, lines: list[str], function: tuple[int, int] | None
) -> tuple[int, int, bool] | None:
    """The region around `line` in `body`: the innermost statement (its header only, when the
    line is in the header of a compound statement other than `match`), or with `function` set, the
    innermost function. None when the line is not inside a statement of `body` that can stand
    alone."""
    for statement in body:
        first, last = _span(statement)
        if not first <= line <= last:
            continue
        alone = _starts_line(lines, statement)  # not `if x: statement`, not `elif`
        if line == first and not alone:
            return None
        if function is None and _handles_npu(statement):
            return (first, last, False) if alone else None  # engine.holds decides inside it
        if function is not None and isinstance(statement, _FUNCTIONS):
            function = (first, last)
        blocks = list(ast_blocks(statement))
        for block in blocks:
            inner = _around(block, line, lines, function)
            if inner is not None:
                return inner
        if function is not None and function != (0, 0):
            return (*function, False)
        if not alone:
            return None  # in an `elif` header: only the whole `if` stands alone
        if blocks and function is None and not isinstance(statement, _READ_WHOLE):
            body_first = _span(blocks[0][0])[0]
            if line < body_first and _starts_line(lines, blocks[0][0]):
                return (first, body_first - 1, True)
        return (first, last, False)
    return None


# Statements read whole when an anchor is in their header: a match statement with its cases (a
# case pattern heads no statement).
_READ_WHOLE = (ast.Match,)


def _handles_npu(statement: ast.stmt) -> bool:
    """An if/elif chain whose tests name the NPU, or a `try` that imports torch_npu: code
    engine.holds keeps as it is, which it must see whole."""
    if isinstance(statement, ast.If):
        tests: list[ast.expr] = []
        branch: ast.stmt | None = statement
        while isinstance(branch, ast.If):
            tests.append(branch.test)
            branch = branch.orelse[0] if len(branch.orelse) == 1 else None
        return any(_names_npu(t) for t in tests)
    if isinstance(statement, ast.Try):
        return any(isinstance(s, ast.Import | ast.ImportFrom) and _names_npu(s) for s in statement.body)
    return False


def _names_npu(node: ast.AST) -> bool:
    for inner in ast.walk(node):
        for text in (getattr(inner, "id", None), getattr(inner, "attr", None), getattr(inner, "module", None),
                     getattr(inner, "name", None), getattr(inner, "value", None)):  # fmt: skip
            if isinstance(text, str) and names_npu(text):
                return True
    return False


def _starts_line(lines: list[str], statement: ast.stmt) -> bool:
    """Whether a statement is the first thing on its first line (not `if x: it`, not `elif`)."""
    first, _ = _span(statement)
    text = lines[first - 1]
    indent = len(text) - len(text.lstrip(" \t\f"))
    column = min(
        [statement.col_offset, *(d.col_offset - 1 for d in getattr(statement, "decorator_list", []))]
    )
    return column <= indent and not text[indent:].startswith("elif")


def _with_leading_comments(lines: list[str], first: int) -> int:
    """libcst hands the comment (and blank) lines right above a statement to the statement; so
    do we, so that the statement's code reads the same."""
    while first > 1 and (_comment(lines[first - 2]) or not lines[first - 2].strip()):
        first -= 1
    return first


def _comment(line: str) -> bool:
    return line.lstrip().startswith("#")


# ---------------------------------------------------------------------------- the module of regions


@dataclass(frozen=True)
class Placed:
    """Where a region's lines went in the module of regions: its lines [start, end] there are
    the file's lines shifted by `offset`."""

    start: int
    end: int
    offset: int


def module_of_regions(lines: list[str], regions: list[Region]) -> tuple[str, list[Placed]]:
    """One module holding every region, each framed by `if 1:` when indented."""
    parts: list[str] = []
    placed: list[Placed] = []
    line = 1
    for region in regions:
        text = lines[region.first - 1 : region.last]
        code = next((t for t in text if t.strip() and not _comment(t)), "")
        newline = "\r\n" if code.endswith("\r\n") else "\r" if code.endswith("\r") else "\n"
        if text and not text[-1].endswith(("\n", "\r")):
            text = [*text[:-1], text[-1] + newline]
        if region.header_only:
            indent = code[: len(code) - len(code.lstrip(" \t"))]
            text = [*text, f"{indent}    pass{newline}"]
        if code[:1] in (" ", "\t"):
            parts.append(f"if 1:{newline}")
            line += 1
        placed.append(Placed(line, line + region.last - region.first, region.first - line))
        parts += text
        line += len(text)
    return "".join(parts), placed


def file_line(placed: list[Placed], line: int) -> int:
    """The file's line number of a line of the module of regions."""
    at = bisect.bisect_right([p.start for p in placed], line) - 1
    return line + placed[at].offset
