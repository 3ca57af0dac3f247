"""Imports under the rules' fixes: which imported names the rules rename (decided once, before
the pass, so every use agrees with its import), the rewritten from-imports, the imports a fixed
file needs added (each module once, right after the file's torch import, else after its last
top-level import, else after the docstring and __future__ lines; torch_npu where torch is
imported), and the imports a fix leaves unused."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import libcst as cst

from npu_migrate.engine.names import ImportTable, dotted_parts, is_docstring, module_name
from npu_migrate.engine.positions import positions

if TYPE_CHECKING:
    from npu_migrate.rules.schema import Rule

# torch.npu is registered by torch_npu as an alias module; its submodules are only importable
# under their real package, so import statements name torch_npu.npu.<sub> instead.
IMPORT_PATHS = {"torch.npu": "torch_npu.npu"}


def import_path(qualified: str) -> str:
    """The name to write in an import statement for `qualified`."""
    for alias, real in IMPORT_PATHS.items():
        if qualified == alias or qualified.startswith(alias + "."):
            return real + qualified[len(alias) :]
    return qualified


def renamed(qualified: str, mapping: dict[str, str]) -> str | None:
    """Apply the longest matching prefix of a rename map to a qualified name."""
    for old in sorted(mapping, key=len, reverse=True):
        if qualified == old or qualified.startswith(old + "."):
            return mapping[old] + qualified[len(old) :]
    return None


@dataclass(frozen=True)
class PlannedImport:
    target: str  # the qualified name the local name will be bound to
    local: str  # the local name after the rewrite
    rule: Rule


@dataclass
class ImportPlan:
    """How rules rewrite the names a file imports, decided before the rewrite so that every
    use of an imported name agrees with its (possibly renamed) import."""

    locals: dict[str, PlannedImport] = field(default_factory=dict)
    # Known after a first pass (FileContext.bindings_to_keep): renamed locals whose old binding
    # stays beside the new one (a fix leaves some use of them), and those the file does not use
    # at all (it re-exports them: the import stays as it is).
    kept: frozenset[str] = frozenset()
    unused: frozenset[str] = frozenset()


def plan_imports(table: ImportTable, best: Callable[[str], tuple[Rule, int] | None]) -> ImportPlan:
    """Decide every import rename up front, so uses anywhere in the file follow their import.

    An imported function renamed exactly (`is_nccl_available`) takes its new name everywhere; an
    imported namespace keeps its local name (`... import mstx as nvtx`), because members the
    rules leave alone must still resolve through it."""
    plan = ImportPlan()
    for name in table.named:
        hit = best(name.qualified)
        new = renamed_by(hit[0], name.qualified) if hit else None
        if hit and new:
            exact = hit[1] % 2 == 1
            new_local = name.local if name.aliased or not exact else new.rsplit(".", 1)[-1]
            plan.locals[name.local] = PlannedImport(import_path(new), new_local, hit[0])
    return plan


def renamed_by(rule: Rule, qualified: str) -> str | None:
    """What a rule's rename fix makes of a qualified name, if it has one."""
    if rule.fix is None or not rule.fix.rename:
        return None
    return renamed(qualified, rule.fix.rename)


def regroup(
    statement: cst.ImportFrom, base: str, planned: list[PlannedImport | None], plan: ImportPlan
) -> cst.ImportFrom | cst.FlattenSentinel[cst.ImportFrom]:
    """The from-import with each planned alias moved to its new module (one statement per
    module, in order of first appearance). `base` is the module it imports from, absolute; a
    relative import keeps its spelling where the module stays, and is written absolute where
    it moves. Kept locals stay bound beside their new names, unused ones as they are."""
    groups: dict[str, list[cst.ImportAlias]] = {}
    bound = {(base, a.evaluated_name, a.evaluated_alias or a.evaluated_name) for a in statement.names}  # type: ignore[union-attr]
    for alias, planned_here in zip(statement.names, planned, strict=True):  # type: ignore[arg-type]
        local = alias.evaluated_alias or alias.evaluated_name
        if planned_here is None or local in plan.unused:
            groups.setdefault(base, []).append(alias)
            continue
        module, _, name = planned_here.target.rpartition(".")
        if local in plan.kept:
            groups.setdefault(base, []).append(alias)
            if (module, name, planned_here.local) in bound:
                continue  # the statement binds the new name already
        as_name = cst.AsName(name=cst.Name(planned_here.local)) if planned_here.local != name else None
        groups.setdefault(module, []).append(alias.with_changes(name=cst.Name(name), asname=as_name))
    statements = []
    last, between = statement.names[-1].comma, _comma_between(statement)  # type: ignore[index]
    for module, aliases in groups.items():
        # A group keeps the statement's layout: the comma that ended it ends it (`name,\n)`).
        aliases[:-1] = [a.with_changes(comma=between) if a.comma is last else a for a in aliases[:-1]]
        aliases[-1] = aliases[-1].with_changes(comma=last if module == base else cst.MaybeSentinel.DEFAULT)
        if module == base:
            statements.append(statement.with_changes(names=aliases))
        else:
            new_module = cst.parse_expression(module)
            statements.append(statement.with_changes(module=new_module, relative=[], names=aliases))
    return statements[0] if len(statements) == 1 else cst.FlattenSentinel(statements)


def _comma_between(statement: cst.ImportFrom) -> cst.Comma | cst.MaybeSentinel:
    """The comma (with its whitespace) that separates two of the statement's names."""
    names = statement.names
    assert not isinstance(names, cst.ImportStar)
    if len(names) > 1:
        return names[0].comma
    if statement.lpar is not None:  # one name in parentheses: the next one goes on its own line too
        return cst.Comma(whitespace_after=statement.lpar.whitespace_after)
    return cst.MaybeSentinel.DEFAULT


def _imported_modules(statement: cst.BaseStatement) -> list[str]:
    if not isinstance(statement, cst.SimpleStatementLine):
        return []
    found: list[str] = []
    for small in statement.body:
        if isinstance(small, cst.Import):
            found.extend(module_name(alias.name) for alias in small.names)
        elif isinstance(small, cst.ImportFrom) and not small.relative:
            found.append(module_name(small.module))
    return found


def _is_import(statement: cst.BaseStatement) -> bool:
    """An import line, relative ones included (a helper defined above `from .x import y` would
    put that import below code: E402 in the user's linter)."""
    return isinstance(statement, cst.SimpleStatementLine) and any(
        isinstance(small, cst.Import | cst.ImportFrom) for small in statement.body
    )


def _imports_torch(small: cst.BaseSmallStatement) -> bool:
    if isinstance(small, cst.Import):
        return any(_is_torch(module_name(alias.name)) for alias in small.names)
    return isinstance(small, cst.ImportFrom) and not small.relative and _is_torch(module_name(small.module))


def _is_torch(module: str) -> bool:
    return module == "torch" or module.startswith("torch.")


def insertion_index(body: Sequence[cst.BaseStatement]) -> int:
    last_torch = _last_torch_import(body)
    if last_torch is not None:
        return last_torch + 1
    last_import, header = -1, 0
    for i, statement in enumerate(body):
        modules = _imported_modules(statement)
        if modules:
            last_import = i
        if (i == header and is_docstring(statement)) or modules == ["__future__"]:
            header = i + 1
    return last_import + 1 if last_import >= 0 else header


def _last_torch_import(body: Sequence[cst.BaseStatement]) -> int | None:
    """The index of the last statement of `body` that imports torch, if one does."""
    found = [
        i
        for i, statement in enumerate(body)
        if isinstance(statement, cst.SimpleStatementLine) and any(map(_imports_torch, statement.body))
    ]
    return found[-1] if found else None


def _after_torch(module: str) -> bool:
    """A module that imports torch as it loads (torch_npu): it can only go where torch is imported,
    or a file that runs without torch (torch imported in a `try`, an `if`, a function) would not."""
    return module == "torch_npu" or module.startswith("torch_npu.")


def add_imports(
    module: cst.Module, wanted: list[str], table: ImportTable
) -> tuple[cst.Module, list[tuple[int, str]]]:
    """The module with `import X` added for each wanted module it does not bind yet, and
    (line, module) for each line added. torch_npu goes right after the statement that imports
    torch at the top level, in its line where more statements follow on it (`import torch; x =
    t.npu()`); in a file that imports torch only in blocks (a `try` with an ImportError fallback,
    an `if`, a function), after each of those imports, in its block."""
    missing = [m for m in dict.fromkeys(wanted) if not table.binds_module(m)]
    if not missing:
        return module, []
    missing.sort(key=lambda m: m != "torch")  # torch must come before torch_npu
    late = [m for m in missing if _after_torch(m)]
    at_top = "torch" in missing or _last_torch_import(module.body) is not None
    nested = [] if at_top or not late else _nested_torch_imports(module)
    late = late if nested else []
    placed = _Placed(module.config_for_parsing)
    top = [m for m in missing if m not in late]
    if top:
        module = _with_imports_at_top(module, top, placed)
    if late:
        module = module.visit(_ImportAfter(set(nested), late, placed))
    where = positions(module, [node for node, _ in placed.nodes])
    return module, sorted((where[node].start.line, name) for node, name in placed.nodes)


@dataclass
class _Placed:
    """The import statements added, each with the module it imports."""

    config: cst.PartialParserConfig
    nodes: list[tuple[cst.CSTNode, str]] = field(default_factory=list)

    def lines(self, modules: list[str]) -> list[cst.SimpleStatementLine]:
        new = [cst.parse_statement(f"import {m}\n", config=self.config) for m in modules]
        self.nodes += zip(new, modules, strict=True)
        return new  # type: ignore[return-value]

    def spliced(self, line: cst.SimpleStatementLine, modules: list[str]) -> cst.SimpleStatementLine | None:
        """`import torch; import torch_npu; x = t.npu()`: the imports right after the line's last
        torch import where more statements follow it on the line (else None: a line of their own)."""
        torch = [i for i, small in enumerate(line.body) if _imports_torch(small)]
        if not torch or torch[-1] == len(line.body) - 1:
            return None
        at = torch[-1] + 1
        then = cst.Semicolon(whitespace_after=cst.SimpleWhitespace(" "))
        new = [cst.Import([cst.ImportAlias(cst.parse_expression(m))], semicolon=then) for m in modules]  # type: ignore[arg-type]
        self.nodes += zip(new, modules, strict=True)
        return line.with_changes(body=[*line.body[:at], *new, *line.body[at:]])


def _with_imports_at_top(module: cst.Module, modules: list[str], placed: _Placed) -> cst.Module:
    body = list(module.body)
    at = insertion_index(body)
    line = body[at - 1] if at else None
    if isinstance(line, cst.SimpleStatementLine) and (spliced := placed.spliced(line, modules)):
        body[at - 1] = spliced
        return module.with_changes(body=body)
    return module.with_changes(body=[*body[:at], *placed.lines(modules), *body[at:]])


def _nested_torch_imports(module: cst.Module) -> list[cst.SimpleStatementLine]:
    found = _TorchImports()
    module.visit(found)
    return found.found


class _TorchImports(cst.CSTVisitor):
    """The statements that import torch inside blocks, where the file's own code runs them (not
    under `if TYPE_CHECKING:`)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[cst.SimpleStatementLine] = []

    def visit_If(self, node: cst.If) -> bool:
        return not (isinstance(node.test, cst.Name) and node.test.value == "TYPE_CHECKING")

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        if any(map(_imports_torch, node.body)):
            self.found.append(node)
        return False


class _ImportAfter(cst.CSTTransformer):
    """Each import of `modules` right after every one of the `torch` statements, in its block."""

    def __init__(self, torch: set[cst.SimpleStatementLine], modules: list[str], placed: _Placed) -> None:
        super().__init__()
        self.torch = torch
        self.modules = modules
        self.placed = placed

    def leave_SimpleStatementLine(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        if original not in self.torch:
            return updated
        return self.placed.spliced(updated, self.modules) or cst.FlattenSentinel(
            [updated, *self.placed.lines(self.modules)]
        )


def add_helpers(module: cst.Module, helpers: dict[str, str]) -> tuple[cst.Module, list[tuple[int, str]]]:
    """The module with each helper function it does not define yet, after its last top-level
    import, and (line, name) for each helper added."""
    body = list(module.body)
    defined = {s.name.value for s in body if isinstance(s, cst.FunctionDef | cst.ClassDef)}
    missing = {name: code for name, code in helpers.items() if name not in defined}
    if not missing:
        return module, []
    at = max((i + 1 for i, s in enumerate(body) if _is_import(s)), default=insertion_index(body))
    line = module.with_changes(body=body[:at]).code.count("\n") + 1
    new: list[cst.BaseStatement] = []
    added = []
    for name, code in missing.items():
        statement = cst.parse_statement(code, config=module.config_for_parsing)
        empty = cst.EmptyLine(indent=False)
        statement = statement.with_changes(leading_lines=[empty, empty])
        added.append((line + 2, name))
        line += module.with_changes(body=[statement]).code.count("\n")
        new.append(statement)
    following = body[at:]
    if following and len(following[0].leading_lines) < 2:
        blank = [cst.EmptyLine(indent=False)] * (2 - len(following[0].leading_lines))
        following[0] = following[0].with_changes(leading_lines=[*blank, *following[0].leading_lines])
    return module.with_changes(body=[*body[:at], *new, *following]), added


Statement = TypeVar("Statement", cst.Import, cst.ImportFrom)


class _NamesUsed(cst.CSTVisitor):
    """Every name a module uses outside its import statements: not the names it defines or
    passes by keyword, nor attributes (a method `_unpad_input`, `self._unpad_input`, does not use
    an imported `_unpad_input`)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()
        self._not_uses: set[int] = set()  # ids of Name nodes that are not uses

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._not_uses.add(id(node.attr))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._not_uses.add(id(node.name))

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._not_uses.add(id(node.name))

    def visit_Param(self, node: cst.Param) -> None:
        self._not_uses.add(id(node.name))

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._not_uses.add(id(node.keyword))

    def visit_Name(self, node: cst.Name) -> None:
        if id(node) not in self._not_uses:
            self.names.add(node.value)


class _DropImports(cst.CSTTransformer):
    def __init__(self, qualified: set[str], used: set[str], table: ImportTable, checks: set[str]) -> None:
        super().__init__()
        self.qualified = qualified
        self.table = table
        self.used = used
        self.checks = checks
        self.dropped: list[str] = []
        self.gone: dict[int, Sequence[cst.EmptyLine]] = {}  # a line removed -> its blank lines before

    def leave_ImportFrom(
        self, original: cst.ImportFrom, updated: cst.ImportFrom
    ) -> cst.ImportFrom | cst.RemovalSentinel:
        base = self.table.imported_from(updated)
        if base is None or isinstance(updated.names, cst.ImportStar):
            return updated

        def dropped(alias: cst.ImportAlias) -> str | None:
            name = f"{base}.{alias.evaluated_name}"
            unused = (alias.evaluated_alias or alias.evaluated_name) not in self.used
            return name if name in self.qualified and unused else None

        return self._prune(updated, dropped)

    def leave_Import(self, original: cst.Import, updated: cst.Import) -> cst.Import | cst.RemovalSentinel:
        """`import apex` goes when apex.optimizers.FusedSGD was the only thing used from it."""

        def dropped(alias: cst.ImportAlias) -> str | None:
            module = module_name(alias.name)
            unused = (alias.evaluated_alias or module.split(".")[0]) not in self.used
            return module if unused and any(q.startswith(module + ".") for q in self.qualified) else None

        return self._prune(updated, dropped)

    def _prune(
        self, statement: Statement, dropped: Callable[[cst.ImportAlias], str | None]
    ) -> Statement | cst.RemovalSentinel:
        """The statement without the aliases `dropped` names (recorded), or nothing if none is left."""
        kept = []
        for alias in statement.names:  # type: ignore[union-attr]
            name = dropped(alias)
            if name is None:
                kept.append(alias)
            else:
                self.dropped.append(name)
        if len(kept) == len(statement.names):  # type: ignore[arg-type]
            return statement
        if not kept:
            return cst.RemoveFromParent()
        kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return statement.with_changes(names=kept)

    def leave_SimpleStatementLine(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine | cst.RemovalSentinel:
        body = [s for s in updated.body if not self._is_check(s)]
        if body:
            return updated.with_changes(body=body)
        self.gone[id(original)] = [line for line in original.leading_lines if line.comment is None]
        return cst.RemoveFromParent()

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        """A top-level line that went leaves its blank lines before to the line after it (a
        module docstring stays apart from the imports when the first import went)."""
        if not self.gone:
            return updated
        body, at, blanks = list(updated.body), 0, None
        for statement in original.body:
            if id(statement) in self.gone:
                blanks = blanks or self.gone[id(statement)]
                continue
            if blanks and not body[at].leading_lines:
                body[at] = body[at].with_changes(leading_lines=blanks)
            blanks, at = None, at + 1
        return updated.with_changes(body=body)

    def _is_check(self, statement: cst.BaseSmallStatement) -> bool:
        """A statement that only calls a check for what the fixes replaced."""
        if (
            not self.checks
            or not isinstance(statement, cst.Expr)
            or not isinstance(statement.value, cst.Call)
        ):
            return False
        parts = dotted_parts(statement.value.func)
        return parts is not None and self.table.qualify(parts) in self.checks

    def leave_IndentedBlock(
        self, original: cst.IndentedBlock, updated: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        if not updated.body:
            return updated.with_changes(body=[cst.SimpleStatementLine([cst.Pass()])])
        first = updated.body[0]
        unchanged = len(updated.body) == len(original.body) or original.body[0].deep_equals(first)
        if unchanged or not isinstance(first, cst.SimpleStatementLine | cst.BaseCompoundStatement):
            return updated
        # the block's first statement went: the blank line that followed it no longer separates anything
        kept = list(itertools.dropwhile(lambda line: line.comment is None, first.leading_lines))
        return updated.with_changes(body=[first.with_changes(leading_lines=kept), *updated.body[1:]])


def drop_unused_imports(
    module: cst.Module, qualified: set[str], table: ImportTable, checks: set[str]
) -> tuple[cst.Module, list[str]]:
    """The module without the from-imports of `qualified` names it no longer uses, and the
    qualified names whose imports went. The statements that only call one of `checks` go first,
    as what they check for is no longer used."""
    if not qualified and not checks:
        return module, []
    if checks:
        module = module.visit(_DropImports(set(), set(), table, checks))
    used = _NamesUsed()
    module.visit(used)
    dropper = _DropImports(qualified, used.names, table, set())
    return module.visit(dropper), dropper.dropped
