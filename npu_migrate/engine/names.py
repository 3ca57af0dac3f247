"""Cheap name resolution: one walk over a file's import statements builds a table of local
names to qualified names; dotted expressions are then resolved by looking up their head.

This replaces libcst's QualifiedNameProvider (about 8x the cost of the parse itself). Imports are
treated as file-global, which is how nearly all model code uses them; shadowing a module name
with a local variable is not tracked. Relative imports resolve through the file's package, and a
module's own top-level definitions are `<module>.<name>` (ModulePath, found at discovery).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import libcst as cst

from npu_migrate.model import NO_MODULE, ModulePath

if TYPE_CHECKING:
    from npu_migrate.rules.schema import Rule

_BLOCKS = (
    cst.IndentedBlock,
    cst.Else,
    cst.ExceptHandler,
    cst.ExceptStarHandler,
    cst.Finally,
    cst.If,
    cst.MatchCase,
    cst.SimpleStatementSuite,
)


def dotted_parts(node: cst.BaseExpression) -> list[str] | None:
    """['torch', 'cuda', 'amp'] for `torch.cuda.amp`; None when it is not a plain dotted name."""
    parts: list[str] = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name):
        return None
    parts.append(node.value)
    parts.reverse()
    return parts


def module_name(node: cst.Attribute | cst.Name | None) -> str:
    if node is None:
        return ""
    parts = dotted_parts(node)
    return ".".join(parts) if parts else ""


def name_matches(qualified: str | None, patterns: list[str]) -> bool:
    """Whether a qualified name is one of `patterns`: exact names, or 'a.b.*' for anything
    strictly under a.b (the same reading the rule index uses)."""
    if qualified is None:
        return False
    return any(qualified == p or (p.endswith(".*") and qualified.startswith(p[:-1])) for p in patterns)


def small_statements(body: Sequence[cst.BaseStatement]) -> Iterator[cst.BaseSmallStatement]:
    """Every simple statement in a body, nested blocks included, without visiting expressions."""
    for _, statement in statement_lines(body):
        yield statement


def method_of(module: cst.Module, function: cst.FunctionDef, name: str) -> cst.FunctionDef | None:
    """The method `name` of the top-level class that defines `function` as a method: what
    `self.name(...)` calls there (unless an instance or a subclass replaces it)."""
    for statement in module.body:
        if isinstance(statement, cst.ClassDef) and isinstance(statement.body, cst.IndentedBlock):
            body = statement.body.body
            if any(s is function for s in body):
                methods = (s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == name)
                return next(methods, None)
    return None


def is_docstring(statement: cst.BaseStatement) -> bool:
    """A statement line that is only a string literal (a module's or a function's docstring)."""
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, cst.SimpleString | cst.ConcatenatedString)
    )


def statement_lines(
    body: Sequence[cst.BaseStatement],
) -> Iterator[tuple[cst.SimpleStatementLine | cst.SimpleStatementSuite, cst.BaseSmallStatement]]:
    """Every simple statement in a body with the line (or suite) that holds it."""
    for statement in body:
        yield from _walk(statement)


def _walk(
    node: cst.CSTNode,
) -> Iterator[tuple[cst.SimpleStatementLine | cst.SimpleStatementSuite, cst.BaseSmallStatement]]:
    if isinstance(node, cst.SimpleStatementLine | cst.SimpleStatementSuite):
        for small in node.body:
            yield node, small
    elif isinstance(node, cst.IndentedBlock):
        yield from statement_lines(node.body)
    else:
        for child in node.children:
            if isinstance(child, _BLOCKS):
                yield from _walk(child)


def ast_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement in a stdlib-parsed body, nested blocks included, in source order (a stack,
    not nested generators: each statement is handed up once, however deep it is)."""
    pending = body[::-1]
    while pending:
        statement = pending.pop()
        yield statement
        for block in reversed(list(ast_blocks(statement))):
            pending += block[::-1]


def ast_blocks(statement: ast.stmt) -> Iterator[list[ast.stmt]]:
    """The blocks of statements a compound statement holds."""
    for attribute in ("body", "orelse", "finalbody"):
        block = getattr(statement, attribute, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            yield block
    for handler in getattr(statement, "handlers", []):
        yield handler.body
    for case in getattr(statement, "cases", []):
        yield case.body


@dataclass(frozen=True)
class ImportedName:
    local: str
    qualified: str
    aliased: bool  # bound with `as`


OTHER_FRAMEWORKS = frozenset({"jax", "flax", "tensorflow", "keras", "mindspore", "paddle", "mlx", "oneflow"})


@dataclass
class ImportTable:
    """Local name -> qualified name, for every name a file binds by import (or defines at its
    top level), read from a libcst tree (`of`) or, where no libcst tree is at hand, from the
    stdlib's (`of_ast`)."""

    where: ModulePath = NO_MODULE  # for relative imports and own definitions
    bindings: dict[str, str] = field(default_factory=dict)
    bound: list[tuple[str, str]] = field(default_factory=list)  # every binding, in order (a local may repeat)
    named: list[ImportedName] = field(default_factory=list)  # what from-imports and `as` bind
    imports: list[cst.Import | cst.ImportFrom] = field(default_factory=list)  # with `of` only

    @classmethod
    def of(cls, module: cst.Module, where: ModulePath = NO_MODULE) -> ImportTable:
        table = cls(where)
        table.define(s.name.value for s in module.body if isinstance(s, cst.FunctionDef | cst.ClassDef))
        for statement in small_statements(module.body):
            if isinstance(statement, cst.Import):
                table.imports.append(statement)
                for alias in statement.names:
                    table.bind_module(module_name(alias.name), alias.evaluated_alias)
            elif isinstance(statement, cst.ImportFrom):
                table.imports.append(statement)
                base = table.imported_from(statement)
                if base and not isinstance(statement.names, cst.ImportStar):
                    for alias in statement.names:
                        table.bind_from(base, alias.evaluated_name, alias.evaluated_alias)
        return table

    @classmethod
    def of_ast(cls, tree: ast.Module, where: ModulePath = NO_MODULE) -> ImportTable:
        table = cls(where)
        table.define(
            s.name for s in tree.body if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        )
        table.add_ast(ast_statements(tree.body))
        return table

    def of_another_framework(self) -> bool:
        """Whether the file is another framework's code (a Flax or TensorFlow copy of a model
        beside its PyTorch one): it imports one of them and not torch, so what looks like a
        PyTorch computation there (RoPE's `x * cos + rotate_half(x) * sin`) runs on their
        arrays, which torch_npu's fused operators do not take."""
        imported = {qualified.partition(".")[0] for _, qualified in self.bound}
        return "torch" not in imported and not imported.isdisjoint(OTHER_FRAMEWORKS)

    def define(self, names: Iterable[str]) -> None:
        """The module's own top-level functions and classes, as `<module>.<name>` (a library's
        own code calls its helpers so); imports of the same name take precedence."""
        if self.where.name:
            for name in names:
                self.bindings.setdefault(name, f"{self.where.name}.{name}")
                self.bound.append((name, f"{self.where.name}.{name}"))

    def add_ast(self, statements: Iterable[ast.AST]) -> None:
        for node in statements:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self.bind_module(alias.name, alias.asname)
            elif isinstance(node, ast.ImportFrom):
                base = self.absolute(node.module or "", node.level)
                for alias in node.names:
                    if base and alias.name != "*":
                        self.bind_from(base, alias.name, alias.asname)

    def imported_from(self, statement: cst.ImportFrom) -> str | None:
        """The absolute module a from-import reads; None for a relative one outside the known
        package."""
        return self.absolute(module_name(statement.module), len(statement.relative))

    def absolute(self, module: str, level: int) -> str | None:
        """`module` imported with `level` leading dots, as an absolute name (PEP 328)."""
        if not level:
            return module or None
        parts = self.where.package.split(".") if self.where.package else []
        if len(parts) < level:
            return None
        return ".".join(parts[: len(parts) - level + 1] + ([module] if module else []))

    def bind_module(self, module: str, asname: str | None) -> None:
        """`import a.b` binds `a`; `import a.b as c` binds `c` to a.b."""
        if asname is not None:
            self.bindings[asname] = module
            self.bound.append((asname, module))
            self.named.append(ImportedName(asname, module, aliased=True))
        else:
            head = module.split(".")[0]
            self.bindings.setdefault(head, head)
            self.bound.append((head, head))

    def bind_from(self, module: str, name: str, asname: str | None) -> None:
        local = asname or name
        self.bindings[local] = f"{module}.{name}"
        self.bound.append((local, f"{module}.{name}"))
        self.named.append(ImportedName(local, f"{module}.{name}", aliased=asname is not None))

    def qualify(self, parts: list[str]) -> str | None:
        """The qualified name of a dotted expression, or None if its head is not imported."""
        target = self.bindings.get(parts[0])
        if target is None:
            return None
        return ".".join([target, *parts[1:]])

    def spell(self, qualified: str) -> tuple[str, str | None]:
        """How this file can write `qualified` (through its own aliases where it can), and the
        module to import when it cannot."""
        spellings = [
            local + qualified[len(target) :]
            for local, target in self.bindings.items()
            if qualified == target or qualified.startswith(target + ".")
        ]
        if spellings:
            return min(spellings, key=len), None
        return qualified, qualified.split(".")[0]

    def binds_module(self, name: str) -> bool:
        return self.bindings.get(name) == name


@dataclass
class NameTable:
    """Rules by qualified-name pattern: 'a.b.c' exactly, or 'a.b.*' for anything strictly under
    a.b. A lookup yields each rule with its specificity (exact names beat prefixes, longer
    beats shorter), the order in which rule precedence ranks them."""

    exact: dict[str, list[Rule]] = field(default_factory=lambda: defaultdict(list))
    under: dict[str, list[Rule]] = field(default_factory=lambda: defaultdict(list))

    @classmethod
    def of(cls, entries: Iterable[tuple[Rule, str]]) -> NameTable:
        table = cls()
        for rule, pattern in entries:
            table.add(pattern, rule)
        return table

    def add(self, pattern: str, rule: Rule) -> None:
        if pattern.endswith(".*"):
            self.under[pattern[:-2]].append(rule)
        else:
            self.exact[pattern].append(rule)

    def rules_for(self, qualified: str, whole: bool = False) -> list[tuple[Rule, int]]:
        """Every rule for exactly `qualified` or (unless `whole`) for one of its prefixes, with
        its specificity, most specific first."""
        parts = qualified.split(".")
        found: list[tuple[Rule, int]] = []
        for size in range(len(parts), 0, -1):
            prefix = ".".join(parts[:size]) if size < len(parts) else qualified
            if size == len(parts) or not whole:
                found += [(rule, 2 * size + 1) for rule in self.exact.get(prefix, ())]
            if size < len(parts):
                found += [(rule, 2 * size) for rule in self.under.get(prefix, ())]
        return found
