"""Import statements under renames: which imported names a file's rules rename, decided once
before the rewrite so every use agrees with its import, and the rewritten from-imports."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from npu_migrate.index import NameHit, RuleIndex
from npu_migrate.names import ImportTable, module_name
from npu_migrate.ruleset import Rule

# torch.npu is registered by torch_npu as an alias module; its submodules are only importable
# under their real package, so import statements name torch_npu.npu.<sub> instead.
IMPORT_PATHS = {"torch.npu": "torch_npu.npu"}


def import_path(qualified: str) -> str:
    """The name to write in an import statement for `qualified`."""
    for alias, real in IMPORT_PATHS.items():
        if qualified.startswith(alias + "."):
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


def plan_imports(index: RuleIndex, table: ImportTable) -> ImportPlan:
    """Decide every import rename up front, so uses anywhere in the file follow their import.

    An imported function renamed exactly (`is_nccl_available`) takes its new name everywhere; an
    imported namespace keeps its local name (`... import mstx as nvtx`), because members the
    rules leave alone must still resolve through it."""
    plan = ImportPlan()
    for statement in table.imports:
        if isinstance(statement, cst.ImportFrom) and (
            statement.relative or isinstance(statement.names, cst.ImportStar)
        ):
            continue
        base = module_name(statement.module) + "." if isinstance(statement, cst.ImportFrom) else ""
        for alias in statement.names:  # type: ignore[union-attr]
            if isinstance(statement, cst.Import) and alias.asname is None:
                continue  # `import a.b` binds `a`, which the rename leaves alone
            qualified = base + module_name(alias.name)
            hit = index.names.lookup(qualified, whole=True)
            new = renamed_by(hit, qualified)
            if hit and new:
                exact = hit.specificity % 2 == 1
                local = alias.evaluated_alias or alias.evaluated_name
                new_local = local if alias.asname or not exact else new.rsplit(".", 1)[-1]
                plan.locals[local] = PlannedImport(import_path(new), new_local, hit.rule)
    return plan


def renamed_by(hit: NameHit | None, qualified: str) -> str | None:
    if hit is None or hit.rule.fix is None or not hit.rule.fix.rename:
        return None
    return renamed(qualified, hit.rule.fix.rename)


def regroup(
    statement: cst.ImportFrom, base: str, planned: list[PlannedImport | None]
) -> cst.ImportFrom | cst.FlattenSentinel[cst.ImportFrom]:
    """The from-import with each planned alias moved to its new module (one statement per
    module, in order of first appearance)."""
    groups: dict[str, list[cst.ImportAlias]] = {}
    for alias, plan in zip(statement.names, planned, strict=True):  # type: ignore[arg-type]
        module = base
        if plan is not None:
            module, _, name = plan.target.rpartition(".")
            as_name = cst.AsName(name=cst.Name(plan.local)) if plan.local != name else None
            alias = alias.with_changes(name=cst.Name(name), asname=as_name)
        groups.setdefault(module, []).append(alias)
    statements = []
    for module, aliases in groups.items():
        aliases[-1] = aliases[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        new_module = statement.module if module == base else cst.parse_expression(module)
        statements.append(statement.with_changes(module=new_module, names=aliases))
    return statements[0] if len(statements) == 1 else cst.FlattenSentinel(statements)
