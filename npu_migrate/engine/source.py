"""One file through the engine: prefilter, parse, resolve imports, match and fix in one pass,
then edit imports. Pure: bytes in, a FileResult out; no file system access."""

from __future__ import annotations

import ast
from collections.abc import Mapping

import libcst as cst
from libcst.metadata import CodeRange, PositionProvider

from npu_migrate.engine.context import FileContext
from npu_migrate.engine.imports import add_imports, drop_unused_imports
from npu_migrate.engine.index import RuleIndex
from npu_migrate.engine.names import ImportTable, module_name
from npu_migrate.engine.transformer import Transformer
from npu_migrate.model import FileResult
from npu_migrate.rules.base import Applicability


def migrate_source(
    source: bytes, index: RuleIndex, enabled: frozenset[Applicability] = frozenset()
) -> FileResult:
    """Find (and, for the enabled applicabilities, fix) everything the rules match."""
    if not index.may_match(source.decode("latin-1")):
        return FileResult()
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        return FileResult(error=_syntax_error(source, exc))
    except (UnicodeDecodeError, LookupError, SyntaxError) as exc:
        return FileResult(error=f"cannot decode: {exc}")
    table = ImportTable.of(module)
    ctx = FileContext(module, table, index.names.plan(table), enabled)
    rewritten = module.visit(Transformer(ctx, [kind.matcher(ctx) for kind in index.kinds]))
    if not ctx.matches:
        return FileResult(overridden=ctx.overridden)
    positions = _positions(module)
    matches = ctx.matches
    result = FileResult(overridden=ctx.overridden)
    if any(m.applied for m in matches):
        rewritten, dropped = drop_unused_imports(rewritten, ctx.droppable_imports)
        rewritten, result.added_imports = add_imports(rewritten, ctx.needed_imports, table)
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
    """Every node's position (public API: PositionProvider through a MetadataWrapper that does
    not copy the tree, so the positions are keyed by the nodes the pass matched)."""
    wrapper = cst.MetadataWrapper(module, unsafe_skip_copy=True)
    return wrapper.resolve(PositionProvider)


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
