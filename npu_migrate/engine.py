"""One file through the road: prefilter, parse, resolve imports, match and fix in one pass,
add imports. Pure: bytes in, findings and new bytes out; no file system access."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import CodeRange, PositionProvider
from libcst.metadata.position_provider import PositionProvidingCodegenState

from npu_migrate.import_plan import plan_imports
from npu_migrate.imports import add_imports, drop_unused_imports
from npu_migrate.index import RuleIndex
from npu_migrate.names import ImportTable, module_name
from npu_migrate.rewriter import Finding, Rewriter
from npu_migrate.ruleset import Applicability


@dataclass
class SourceResult:
    findings: list[Finding] = field(default_factory=list)
    added_imports: list[tuple[int, str]] = field(default_factory=list)
    removed_imports: list[tuple[int, str]] = field(default_factory=list)  # (line, qualified name)
    new_source: bytes | None = None  # None: unchanged
    error: str | None = None  # set when the file could not be parsed


def migrate_source(
    source: bytes, index: RuleIndex, enabled: frozenset[Applicability] = frozenset()
) -> SourceResult:
    """Find (and, for the enabled applicabilities, fix) everything the rules match."""
    if not index.may_match(source.decode("latin-1")):
        return SourceResult()
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        return SourceResult(error=_syntax_error(source, exc))
    except (UnicodeDecodeError, LookupError, SyntaxError) as exc:
        return SourceResult(error=f"cannot decode: {exc}")
    table = ImportTable.of(module)
    rewriter = Rewriter(module, index, set(enabled), table, plan_imports(index, table))
    rewritten = module.visit(rewriter)
    if not rewriter.matches:
        return SourceResult()
    positions = _positions(module)
    matches = rewriter.matches
    result = SourceResult()
    if any(m.applied for m in matches):
        rewritten, dropped = drop_unused_imports(rewritten, rewriter.droppable_imports)
        rewritten, result.added_imports = add_imports(rewritten, rewriter.needed_imports, table)
        result.removed_imports = [
            (positions[s].start.line, name)
            for s in table.imports
            for name in _bound_names(s)
            if name in dropped
        ]
        gone = {s for s in table.imports if _bound_names(s) and set(_bound_names(s)) <= set(dropped)}
        matches = [m for m in matches if m.replacement is not None or m.node not in gone]  # the import went
        new_source = rewritten.bytes
        result.new_source = new_source if new_source != source else None
    result.findings = sorted(
        (m.at(positions) for m in matches), key=lambda f: (f.line, f.column, f.rule.code)
    )
    return result


def _positions(module: cst.Module) -> Mapping[cst.CSTNode, CodeRange]:
    """Every node's position, from one position-tracking code generation. This is what
    PositionProvider computes, without MetadataWrapper.resolve's extra traversal of the whole
    tree (which doubled the cost)."""
    provider = PositionProvider()
    module._codegen(
        PositionProvidingCodegenState(
            default_indent=module.default_indent, default_newline=module.default_newline, provider=provider
        )
    )
    return provider._computed


def _bound_names(statement: cst.Import | cst.ImportFrom) -> list[str]:
    """What an import statement imports: `a.b` for `import a.b`, `m.x` for `from m import x`."""
    if isinstance(statement, cst.ImportFrom):
        if statement.relative or isinstance(statement.names, cst.ImportStar):
            return []
        base = module_name(statement.module)
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
