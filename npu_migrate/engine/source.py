"""One file through the engine. Bytes in, a FileResult out; no file system access.

The road: the prefilter (can any rule match these words?), then the stdlib parser finds the
regions where a rule can match (engine.regions) and libcst parses and matches only those; a file
is parsed whole only when an enabled fix applies in it (to rewrite it), or when a region cannot
be parsed alone. Both roads run the same one-pass transformer, so they find the same things."""

from __future__ import annotations

import ast
import functools
import io
import sys
import tokenize
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from difflib import SequenceMatcher

import libcst as cst
from libcst.metadata import CodeRange

from npu_migrate.engine.context import FileContext, Match
from npu_migrate.engine.imports import ImportPlan, add_helpers, add_imports, drop_unused_imports
from npu_migrate.engine.index import RuleIndex
from npu_migrate.engine.names import ImportTable, module_name
from npu_migrate.engine.partial_tree import PartialTree, tree_around
from npu_migrate.engine.positions import positions
from npu_migrate.engine.program.model import Program
from npu_migrate.engine.program.run import cuda_comparisons
from npu_migrate.engine.program.spans import Span
from npu_migrate.engine.program_holds import program_holds
from npu_migrate.engine.regions import (
    FunctionAnchor,
    Placed,
    file_line,
    import_bindings,
    line_starts,
    module_of_regions,
    regions,
    split_lines,
)
from npu_migrate.engine.suppressions import Suppressions, marked
from npu_migrate.engine.transformer import Transformer
from npu_migrate.model import NO_MODULE, Applicability, FileResult, Finding, Hold, ModulePath
from npu_migrate.prefilter import word_counts


def migrate_source(
    source: bytes,
    index: RuleIndex,
    enabled: frozenset[Applicability] = frozenset(),
    where: ModulePath = NO_MODULE,
) -> FileResult:
    """Find (and, for the enabled applicabilities, fix) everything the rules match. `where`: the
    module the file is, for its relative imports and its own definitions."""
    text = source.decode("latin-1")  # enough to read the (ASCII) words of any encoding
    counts = word_counts(text)
    if not index.prefilter.may_match_module(text, counts, where):
        return FileResult(unused_suppressions=Suppressions.of(source).unused() if marked(source) else [])
    found = scan_regions(source, index, enabled, counts, where)
    if found is not None and not any(f.applied for f in found.findings):
        return found
    # A fix applies (the regions road parsed the file with the stdlib: not too deep), or the
    # regions road gave up (it may not have parsed it).
    return migrate_whole(source, index, enabled, checked=found is not None, words=counts, where=where)


def scan_regions(
    source: bytes,
    index: RuleIndex,
    enabled: frozenset[Applicability],
    counts: Counter[str],
    where: ModulePath = NO_MODULE,
) -> FileResult | None:
    """The findings, from the regions where a rule can match; None when the file must be parsed
    whole (an encoding or syntax the stdlib parser refuses, a rule with no anchor, regions that
    libcst will not parse)."""
    if index.anchors.anywhere or marked(source):  # suppressions need the whole file's positions
        return None
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
        text = source.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return None
    survey = index.anchors.survey(text, counts)
    if survey is None:
        return FileResult()
    if survey.whole:
        return None
    lines = split_lines(text)
    starts = line_starts(lines)
    cheap = import_bindings(text, lines, starts, where)  # enough to tell most files with no anchor apart
    anchored = survey.lines(cheap, starts) if cheap is not None else None
    if anchored == ([], []):
        return FileResult()
    try:
        # A scan reads the tree around the anchors; a fix found needs the whole file read.
        partial = _tree_around(lines, anchored) if anchored and not enabled else None
        tree = partial.tree if partial else stdlib_parse(text)
        table = ImportTable.of_ast(tree, where)
        statement_lines, function_lines = anchored or survey.lines(table.bound, starts)
        if not statement_lines and not function_lines:
            return FileResult()
        found = regions(tree, lines, statement_lines, function_lines)
        if partial and not all(partial.covers(r.first, r.last) for r in found):  # a script's top level
            tree, partial = stdlib_parse(text), None
            found = regions(tree, lines, statement_lines, function_lines)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    # The whole file's tree, for a match whose use is elsewhere: a scan does not see the errors
    # of code it does not read, as it does not see those of a file without an anchor.
    whole = (lambda: tree) if partial is None else functools.cache(lambda: _tree_or_none(text))
    code, placed = module_of_regions(lines, found)
    try:
        module = cst.parse_module(code)
    except cst.ParserSyntaxError:
        return None
    ctx = _match(
        module,
        table,
        index.names.plan(table),
        index,
        enabled,
        counts,
        lambda focus: _program(text, focus, where, tree, whole),
        lambda line: file_line(placed, line),
        tree_of=whole,
    )
    matches = [m for m in ctx.matches if not m.suppressed]  # here, only what the configuration leaves out
    spans = ctx.positions
    findings = [_placed(m.at(spans), placed) for m in matches]
    return FileResult(
        findings=sorted(findings, key=lambda f: (f.line, f.column, f.rule.code)),
        overridden=ctx.overridden,
        cuda_comparisons=cuda_comparisons(findings, lambda: tree),  # at the findings: read
    )


def migrate_whole(
    source: bytes,
    index: RuleIndex,
    enabled: frozenset[Applicability],
    checked: bool = False,
    words: Collection[str] | None = None,
    where: ModulePath = NO_MODULE,
) -> FileResult:
    """Parse the whole file, match, fix and edit its imports. `checked`: the stdlib parser read
    this file already (so it is not nested too deeply for libcst); `words`: its words, where
    the caller has them."""
    refused = None if checked else _stdlib_refuses(source)
    if refused and refused.fatal:
        return FileResult(error=refused.why)
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        return FileResult(error=_syntax_error(source, exc))
    except UnicodeDecodeError as exc:
        return FileResult.undecodable(source, exc)
    except (LookupError, SyntaxError) as exc:
        return FileResult(error=f"cannot decode: {exc}")
    if refused:  # libcst reads more than Python compiles (`"\N{BOGUS}"`): the file does not run
        return FileResult(error=refused.why)
    table = ImportTable.of(module, where)
    words = word_counts(source.decode("latin-1")) if words is None else words
    suppressions = Suppressions.of(source) if marked(source) else None
    spans_before = positions(module, _all_nodes(module)) if suppressions and suppressions.found else None
    plan = index.names.plan(table)
    text = _text(source)
    tree_of = functools.cache(lambda: _tree_or_none(text))
    ctx = _match(
        module, table, plan, index, enabled, words, lambda focus: _program(text, focus, where, tree_of()),
        suppressions=suppressions, spans=spans_before, tree_of=tree_of,
    )  # fmt: skip
    rewritten = ctx.rewritten
    result = FileResult(
        overridden=ctx.overridden,
        suppressed=sum(m.suppressed and m.candidate.rule.code not in ctx.silenced for m in ctx.matches),
        unused_suppressions=suppressions.unused() if suppressions else [],
    )
    matches: list[Match] = [m for m in ctx.matches if not m.suppressed]
    if not matches:
        return result
    spans = ctx.positions
    if any(m.applied for m in matches):
        rewritten, dropped = drop_unused_imports(
            rewritten, ctx.droppable_imports, table, ctx.droppable_checks
        )
        rewritten, result.added_imports = add_imports(rewritten, ctx.needed_imports, table)
        rewritten, result.added_helpers = add_helpers(rewritten, ctx.needed_helpers)
        result.removed_imports = [
            (spans[s].start.line, name)
            for s in table.imports
            for name in _bound_names(s, table)
            if name in dropped
        ]
        gone = {
            s for s in table.imports if _bound_names(s, table) and set(_bound_names(s, table)) <= set(dropped)
        }
        matches = [m for m in matches if m.replacement is not None or m.node not in gone]  # the import went
        new_source = _as_written(source, module.bytes, rewritten.bytes)
        broken = _broken(source, new_source)
        if broken is not None:
            fixes = sorted({m.candidate.rule.code for m in matches if m.applied})
            return FileResult(
                error=f"the fixes of {', '.join(fixes)} would leave code that does not parse ({broken})",
                tool_failed=True,
            )
        result.new_source = new_source if new_source != source else None
    result.findings = sorted((m.at(spans) for m in matches), key=lambda f: (f.line, f.column, f.rule.code))
    result.cuda_comparisons = cuda_comparisons(result.findings, tree_of)
    return result


def _match(
    module: cst.Module,
    table: ImportTable,
    plan: ImportPlan,
    index: RuleIndex,
    enabled: frozenset[Applicability],
    words: Collection[str],
    program_of: Callable[[Collection[int]], Program],
    place: Callable[[int], int] = lambda line: line,
    suppressions: Suppressions | None = None,
    spans: Mapping[cst.CSTNode, CodeRange] | None = None,
    tree_of: Callable[[], ast.Module | None] = lambda: None,
) -> FileContext:
    """The one pass over a module (a whole file or its regions; `words`: the whole file's;
    `program_of`: the file's program model around some of its lines; `place`: a line of the module
    -> the file's line): the context holds what it found. The pass runs again, knowing more, where a
    renamed import must keep its old name or the program model holds a fix back. `tree_of`: the
    stdlib parser's tree of the whole file, asked for only by a match whose use is elsewhere."""
    decided: dict[tuple[cst.CSTNode, str], Hold] = {}
    program: Program | None = None
    silenced = index.silenced | index.fused if table.of_another_framework() else index.silenced
    while True:
        ctx = FileContext(
            module, table, plan, enabled, words, suppressions, spans, silenced, decided, tree_of
        )
        ctx.rewritten = module.visit(Transformer(ctx, [kind.matcher(ctx) for kind in index.kinds]))
        ctx.drop_unaccompanied()
        kept = ctx.bindings_to_keep()
        if kept is not None:
            plan = kept
            continue
        if not ctx.matches:
            return ctx
        nodes = [node for m in ctx.matches for node in m.nodes]
        ctx.positions = where = positions(module, nodes + list(table.imports))
        spans_in_file = [_span(where[m.node], where[m.nodes[-1]], place) for m in ctx.matches]
        sites = ctx.sites(spans_in_file)
        if not any(site.has_fix for site in sites):
            return ctx  # the model only ever holds fixes: a file of reports needs none
        if program is None:  # read around what it can hold or what can make it hold: not the notes
            weighed = [site.span for site in sites if site.has_fix or site.severe]
            program = program_of({line for s in weighed for line in range(s.line, s.end[0] + 1)})
        found = program_holds(sites, program).items()
        more = {(ctx.matches[i].node, ctx.matches[i].candidate.rule.code): why for i, why in found}
        more = {key: why for key, why in more.items() if key not in decided}
        if not more:
            return ctx
        decided |= more
        if any(m.applied and (m.node, m.candidate.rule.code) in more for m in ctx.matches):
            continue  # a fix to undo: the pass runs again without it
        ctx.hold_matches(more)  # nothing was rewritten there: only the findings change
        kept = ctx.bindings_to_keep()
        if kept is None:
            return ctx
        plan = kept


def _span(where: CodeRange, end: CodeRange, place: Callable[[int], int]) -> Span:
    return Span((place(where.start.line), where.start.column), (place(end.end.line), end.end.column))


def _program(
    text: str,
    focus: Collection[int],
    where: ModulePath,
    tree: ast.Module | None = None,
    whole: Callable[[], ast.Module | None] | None = None,
) -> Program:
    """The program model of a file around the `focus` lines (an empty one where the stdlib
    parser cannot read the file), knowing where the file sits. `tree`: the file's, or its
    partial tree (engine.partial_tree) and `whole` to read the rest."""
    compared = dict(where.compared_elsewhere)
    try:
        tree = tree or stdlib_parse(text)
        program = Program.of(tree, split_lines(text), focus, compared.keys(), whole or (lambda: tree))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        program = Program()
    program.cuda_member_beside = where.cuda_member_beside
    program.compared_elsewhere = compared
    return program


def _tree_around(lines: list[str], anchored: tuple[list[int], list[FunctionAnchor]]) -> PartialTree | None:
    statement_lines, function_lines = anchored
    return tree_around(lines, [*statement_lines, *(a.line for a in function_lines)], stdlib_parse)


def _tree_or_none(text: str) -> ast.Module | None:
    try:
        return stdlib_parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _text(source: bytes) -> str:
    """The file's text (libcst has read it, so its encoding is known to decode it)."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
    return source.decode(encoding)


def _placed(finding: Finding, placed: list[Placed]) -> Finding:
    """A finding in the module of regions, at its place in the file."""
    return replace(
        finding, line=file_line(placed, finding.line), end_line=file_line(placed, finding.end_line)
    )


def _as_written(source: bytes, printed: bytes, new_source: bytes) -> bytes:
    """libcst prints a module without a form feed that starts a line of code, and without the
    last line break of a file whose lines end in a bare carriage return (`printed`, the parsed
    file printed back, shows what it drops): each line the fixes left alone is the original's
    again, and an edited line gets back what was dropped from its start or end."""
    if printed == source:
        return new_source
    original, before, after = (text.splitlines(keepends=True) for text in (source, printed, new_source))
    if len(original) != len(before):  # more than lines' edges dropped: nothing to line up
        return new_source
    lines: list[bytes] = []
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        if tag == "equal":
            lines += original[i1:i2]
        elif tag == "replace" and i2 - i1 == j2 - j1:  # line for line
            lines += (
                _end_back(o, p, _start_back(o, p, e))
                for o, p, e in zip(original[i1:i2], before[i1:i2], after[j1:j2], strict=True)
            )
        elif tag == "replace":  # the block's first and last lines
            block = after[j1:j2]
            block[0] = _start_back(original[i1], before[i1], block[0])
            block[-1] = _end_back(original[i2 - 1], before[i2 - 1], block[-1])
            lines += block
        else:
            lines += after[j1:j2]
    return b"".join(lines)


def _start_back(original: bytes, printed: bytes, edited: bytes) -> bytes:
    """An edited line with what libcst dropped from its original's start (a form feed) put back."""
    return original[: len(original) - len(printed)] + edited if original.endswith(printed) else edited


def _end_back(original: bytes, printed: bytes, edited: bytes) -> bytes:
    """An edited line with what libcst dropped from its original's end (a last bare CR) put back."""
    if original.startswith(printed) and not edited.endswith((b"\r", b"\n")):
        return edited + original[len(printed) :]
    return edited


def stdlib_parse(source: str | bytes) -> ast.Module:
    """The stdlib's parse, held to a plain recursion limit (the engine's thread runs with a
    raised one): code nested past it (about 200 brackets, or thousands of operators) crashes or
    stalls libcst's parser, so it must fail here first."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(min(limit, _NESTING_LIMIT))
    try:
        return ast.parse(source)
    finally:
        sys.setrecursionlimit(limit)


_NESTING_LIMIT = 2000


@dataclass(frozen=True)
class _Refusal:
    why: str
    fatal: bool  # libcst must not parse the file at all (it would crash or stall on it)


def _stdlib_refuses(source: bytes) -> _Refusal | None:
    """Why Python's own parser refuses this file (see stdlib_parse), or None. A file nested too
    deeply must not reach libcst; another syntax error is libcst's to describe, where it sees it."""
    try:
        stdlib_parse(source)
    except SyntaxError as exc:
        deep = "too many nested" in str(exc.msg) or "too complex" in str(exc.msg)
        return _Refusal(f"line {exc.lineno}: " + ("" if deep else "cannot parse: ") + str(exc.msg), deep)
    except RecursionError:
        return _Refusal("nested too deeply for Python's parser", True)
    except MemoryError:
        return _Refusal("Python's parser needs more memory for it than a worker may take", True)
    except ValueError:
        pass
    return None


def _broken(source: bytes, new_source: bytes) -> str | None:
    """Why rewritten code no longer parses, or None. A rule's fix is code from a rule file; a
    file is never written that Python (or, for syntax newer than this Python, libcst) cannot
    read back."""
    try:
        compile(new_source, "<rewritten>", "exec", ast.PyCF_ONLY_AST)
        return None
    except SyntaxError as exc:
        problem = f"line {exc.lineno}: {exc.msg}"
    except ValueError as exc:
        problem = str(exc)
    try:
        compile(source, "<original>", "exec", ast.PyCF_ONLY_AST)
    except (SyntaxError, ValueError):  # Python cannot read the original either: ask libcst
        try:
            cst.parse_module(new_source)
            return None
        except cst.ParserSyntaxError:
            pass
    return problem


def _bound_names(statement: cst.Import | cst.ImportFrom, table: ImportTable) -> list[str]:
    """What an import statement imports: `a.b` for `import a.b`, `m.x` for `from m import x`."""
    if isinstance(statement, cst.ImportFrom):
        base = table.imported_from(statement)
        if base is None or isinstance(statement.names, cst.ImportStar):
            return []
        return [f"{base}.{alias.evaluated_name}" for alias in statement.names]
    return [module_name(alias.name) for alias in statement.names]


def _syntax_error(source: bytes, exc: cst.ParserSyntaxError) -> str:
    """Python's own wording where it has one ("'(' was never closed"), else libcst's."""
    try:
        compile(source, "<source>", "exec", ast.PyCF_ONLY_AST)
    except SyntaxError as python:
        return f"line {python.lineno}: cannot parse: {python.msg}"
    except ValueError:
        pass
    return f"line {exc.raw_line}: cannot parse: {exc.message.splitlines()[0]}"


def _all_nodes(module: cst.Module) -> list[cst.CSTNode]:
    """Every node of the module, for positions known before the pass (suppressions need them)."""
    nodes: list[cst.CSTNode] = []

    class Collect(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            nodes.append(node)
            return True

    module.visit(Collect())
    return nodes
