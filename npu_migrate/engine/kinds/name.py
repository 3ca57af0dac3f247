"""`name:` rules: qualified names (`torch.cuda.synchronize`, `torch.cuda.*`) resolved through the
file's imports and aliases, wherever they are referenced or imported, and where a test spells
one as the target a mock patches (`mock.patch("torch.cuda.synchronize")`): the mock must patch
what the migrated code calls. Rename fixes keep the author's aliases, and an import that a
rename touches is rewritten with every use."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import cmp_to_key
from typing import TYPE_CHECKING, cast

import libcst as cst
from pydantic import Field

from npu_migrate.engine.fixes import chain_source, replace_expression
from npu_migrate.engine.imports import (
    ImportPlan,
    PlannedImport,
    import_path,
    plan_imports,
    regroup,
    renamed,
    renamed_by,
)
from npu_migrate.engine.kinds.arguments import callee
from npu_migrate.engine.kinds.base import Candidate, Fixed, Kind, Matcher
from npu_migrate.engine.kinds.fields import QualifiedNames, Strict
from npu_migrate.engine.names import ImportTable, NameTable, module_name
from npu_migrate.engine.precedence import compare
from npu_migrate.engine.reasons import IMPORT_KEPT, MOCK_KEPT, REEXPORTED
from npu_migrate.engine.regions import Anchors, Token
from npu_migrate.model import Hold
from npu_migrate.prefilter import Prefilter, components

if TYPE_CHECKING:
    from npu_migrate.engine.context import FileContext
    from npu_migrate.rules.schema import Rule


class NameMatch(Strict):
    name: QualifiedNames = Field(
        description="Qualified names resolved through imports; 'a.b.*' matches everything under a.b."
    )
    as_value: bool = Field(
        default=False,
        description="Only where the name is a value an assignment binds, not called or imported: "
        "a class chosen in one place and built in another (`optimizer_cls = torch.optim.AdamW`, "
        "through a conditional expression, or a registry dict's values).",
    )


class NameMatcher(Matcher):
    kind: NameKind

    def __init__(self, ctx: FileContext, kind: NameKind) -> None:
        super().__init__(ctx, kind)
        self.noted: dict[cst.CSTNode, tuple[list[str], str]] = {}  # reference -> (parts, qualified)
        self.targets: set[cst.SimpleString] = set()  # mock targets some rule's name is
        self.chosen: set[cst.CSTNode] = set()  # references that are a value an assignment binds
        self.rebound: set[cst.CSTNode] = set()  # plain names an assignment binds anew

    # ------------------------------------------------------------ references

    def visit_Name(self, node: cst.Name) -> None:
        if self.ctx.facts.is_reference(node):
            self._note(node, [node.value])

    def visit_Attribute(self, node: cst.Attribute) -> None:
        parts = self.ctx.facts.chains.get(node)
        if parts is not None:
            self._note(node, parts)

    def visit_Assign(self, node: cst.Assign) -> None:
        self.chosen.update(_bound_values(node.value))
        self.rebound.update(t.target for t in node.targets if isinstance(t.target, cst.Name))

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self.chosen.update(_bound_values(node.value))

    def visit_Call(self, node: cst.Call) -> None:
        target = _patch_target(self.ctx, node)
        if target is not None and self.kind.table.rules_for(target.evaluated_value):  # type: ignore[arg-type]
            self.targets.add(target)

    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString) -> list[Candidate]:
        if original not in self.targets:
            return []
        qualified = cast(str, original.evaluated_value)
        return [self._fixed_target(c, qualified, updated) for c in self.kind.ranked(qualified)]

    def _fixed_target(self, candidate: Candidate, qualified: str, updated: cst.SimpleString) -> Candidate:
        """A mock's target, renamed as the code it patches is (the string is an absolute path)."""
        fix = candidate.rule.fix
        new_qualified = renamed(qualified, fix.rename) if fix and fix.rename else None
        if new_qualified is None:
            return candidate
        fixed = updated.with_changes(value=f"{updated.prefix}{updated.quote}{new_qualified}{updated.quote}")
        held = self._mocked_elsewhere(qualified)
        return Candidate(
            candidate.rule, fixed, part=candidate.part, specificity=candidate.specificity, held=held
        )

    def _mocked_elsewhere(self, qualified: str) -> Hold | None:
        """Why `qualified` keeps its name here: this file mocks it, and another file of the run
        keeps calling it (ModulePath.kept_elsewhere); every use here is then the mock's."""
        for name, where in self.ctx.table.where.kept_elsewhere:
            if qualified == name or qualified.startswith(name + "."):
                return Hold(MOCK_KEPT, f"this file mocks `{name}`, which {where} keeps calling")
        return None

    def _note(self, node: cst.CSTNode, parts: list[str]) -> None:
        qualified = self.ctx.table.qualify(parts)
        if qualified is not None and self.kind.table.rules_for(qualified):
            self.noted[node] = (parts, qualified)

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> list[Candidate]:
        return self._chain(original, updated)

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> list[Candidate]:
        return self._chain(original, updated)

    def _chain(self, original: cst.BaseExpression, updated: cst.BaseExpression) -> list[Candidate]:
        noted = self.noted.get(original)
        if noted is None:
            return []
        parts, qualified = noted
        found = self.kind.ranked(qualified, chosen=original in self.chosen)
        if original in self.rebound:  # `flash_attn_func = None` where the import failed: no use
            found = [c for c in found if c.rule.fix is not None]
        ranked = [self._fixed(c, parts, qualified, updated) for c in found]
        if not ranked or ranked[0] is None:
            return []  # the best rule's rename is carried by the file's import (and its finding)
        return [c for c in ranked if c is not None]

    def _fixed(
        self, candidate: Candidate, parts: list[str], qualified: str, updated: cst.BaseExpression
    ) -> Candidate | None:
        """The candidate with its fix applied: a rename (None when the import statement carries
        it), or the template's code in place of the reference (a helper the fix writes into the
        file, which the name is then bound to wherever the code passes it)."""
        fix = candidate.rule.fix
        if fix is not None and fix.template:
            fixed = replace_expression(updated, fix.template)
            return replace(candidate, fixed=fixed, held=self._mocked_elsewhere(qualified))
        new_qualified = renamed(qualified, fix.rename) if fix and fix.rename else None
        if new_qualified is None:
            return candidate
        source, module = chain_source(parts, new_qualified, self.ctx.table, self.ctx.plan)
        if source == ".".join(parts):
            return None
        fixed = replace_expression(updated, source)
        return Candidate(
            candidate.rule,
            fixed,
            (module,) if module else (),
            candidate.part,
            candidate.specificity,
            held=self._mocked_elsewhere(qualified),
        )

    # ------------------------------------------------------------ imports

    def leave_Import(self, original: cst.Import, updated: cst.Import) -> list[Candidate]:
        candidates = []
        for alias in updated.names:
            qualified = module_name(alias.name)
            for candidate in self.kind.ranked(qualified, whole=True):
                fixed_alias = _renamed_alias(alias, candidate.rule, qualified)
                fixed = (
                    updated.with_changes(names=[fixed_alias.with_changes(comma=cst.MaybeSentinel.DEFAULT)])
                    if fixed_alias
                    else None
                )
                candidates.append(
                    Candidate(candidate.rule, fixed, part=qualified, specificity=candidate.specificity)
                )
        return candidates

    def leave_ImportFrom(self, original: cst.ImportFrom, updated: cst.ImportFrom) -> list[Candidate]:
        base = self.ctx.table.imported_from(updated)
        if base is None or isinstance(updated.names, cst.ImportStar):
            return []
        planned = self._planned(updated)
        candidates = []
        for alias, plan in zip(updated.names, planned, strict=True):
            if plan is None:  # a rule whose template replaces the uses reports them, not the import
                qualified = f"{base}.{alias.evaluated_name}"
                reports = [c for c in self.kind.ranked(qualified, whole=True) if not _templated(c.rule)]
                candidates += reports[:1]
        proposed = regroup(updated, base, planned, self.ctx.plan)
        held = None
        if isinstance(proposed, cst.ImportFrom) and proposed.deep_equals(updated):  # a rename keeps it
            unused = any(
                (a.evaluated_alias or a.evaluated_name) in self.ctx.plan.unused for a in updated.names
            )
            held = _REEXPORTED if unused else _KEPT_FOR_USES
        rules = {p.rule.code: p.rule for p in planned if p is not None}
        return candidates + [
            Candidate(rule, proposed, part=f"import:{code}", held=held) for code, rule in rules.items()
        ]

    def _planned(self, statement: cst.ImportFrom) -> list[PlannedImport | None]:
        return [self.ctx.plan.locals.get(a.evaluated_alias or a.evaluated_name) for a in statement.names]  # type: ignore[union-attr]

    def compose(self, updated: cst.CSTNode, applied: Sequence[Candidate]) -> Fixed:
        """Import statements take every applied rename at once; other nodes have one fix."""
        rules = {c.rule.code for c in applied}
        if isinstance(updated, cst.Import):
            names = []
            for alias in updated.names:
                qualified = module_name(alias.name)
                winner = next((c for c in applied if c.part == qualified), None)
                fixed_alias = _renamed_alias(alias, winner.rule, qualified) if winner else None
                names.append(fixed_alias or alias)
            return updated.with_changes(names=names)
        if isinstance(updated, cst.ImportFrom):
            enabled = [p if p is not None and p.rule.code in rules else None for p in self._planned(updated)]
            return regroup(updated, self.ctx.table.imported_from(updated) or "", enabled, self.ctx.plan)
        return super().compose(updated, applied)


class NameKind(Kind[NameMatch]):
    key = "name"
    schema = NameMatch
    matcher_type = NameMatcher
    fixes = frozenset({"rename", "template"})

    def __init__(self, rules: Sequence[Rule]) -> None:
        super().__init__(rules)
        self.table = NameTable.of((rule, pattern) for rule, match in self.entries for pattern in match.name)

    @staticmethod
    def keys(match: NameMatch) -> set[str]:
        return {f"name:{name}" for name in match.name}

    def need(self, prefilter: Prefilter) -> None:
        for _, match in self.entries:
            for name in match.name:
                prefilter.need(components(name))

    def anchor(self, anchors: Anchors) -> None:
        for _, match in self.entries:
            anchors.rule([Token.name(pattern) for pattern in match.name])

    def ranked(self, qualified: str, whole: bool = False, chosen: bool = False) -> list[Candidate]:
        """Report-only candidates for every rule on `qualified`, best first; `as_value` rules
        only where the reference is `chosen` (a value an assignment binds)."""
        found = [
            Candidate(rule, None, part=qualified, specificity=s)
            for rule, s in self.table.rules_for(qualified, whole)
            if chosen or not cast(NameMatch, rule.match).as_value
        ]
        return sorted(found, key=cmp_to_key(compare))

    def plan(self, table: ImportTable) -> ImportPlan:
        """How this file's imports are renamed, decided before the pass (see plan_imports)."""

        def best(qualified: str) -> tuple[Rule, int] | None:
            ranked = self.ranked(qualified, whole=True)
            return (ranked[0].rule, ranked[0].specificity) if ranked else None

        return plan_imports(table, best)


_KEPT_FOR_USES = Hold(
    IMPORT_KEPT, "the name stays imported for the code here that keeps using it (see its findings)"
)
_REEXPORTED = Hold(
    REEXPORTED, "this file does not use the name, it re-exports it: its users are migrated where they are"
)


# Calls whose first argument names, as an absolute dotted path, what they patch: unittest.mock's
# patch (imported as `mock.patch` or `patch`), and pytest's `monkeypatch.setattr("a.b.c", value)`
# and pytest-mock's `mocker.patch("a.b.c")`, known by their method names.
_PATCHERS = frozenset({"unittest.mock.patch", "mock.patch"})
_PATCHER_METHODS = frozenset({"patch", "setattr"})


def _patch_target(ctx: FileContext, call: cst.Call) -> cst.SimpleString | None:
    """The dotted string a patcher call is given as its target, or None."""
    first = call.args[0] if call.args else None
    if first is None or first.keyword is not None or not isinstance(first.value, cst.SimpleString):
        return None
    text = first.value.evaluated_value
    if not isinstance(text, str) or "." not in text or not all(p.isidentifier() for p in text.split(".")):
        return None
    method = call.func.attr.value if isinstance(call.func, cst.Attribute) else None
    return first.value if callee(ctx, call) in _PATCHERS or method in _PATCHER_METHODS else None


def _templated(rule: Rule) -> bool:
    return rule.fix is not None and rule.fix.template is not None


def _renamed_alias(alias: cst.ImportAlias, rule: Rule, qualified: str) -> cst.ImportAlias | None:
    new = renamed_by(rule, qualified)
    if not new:
        return None
    path = import_path(new)
    if alias.asname is None and path.split(".")[0] != new.split(".")[0]:
        # `import torch.cuda` binds `torch`, and its renamed uses (`torch.npu.*`) still need it:
        # `import torch_npu.npu` would bind only `torch_npu` (ultralytics' utils/benchmarks.py).
        path = new.split(".")[0]
    return alias.with_changes(name=cst.parse_expression(path))


def _bound_values(value: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The expressions an assignment's value binds as they are, to be used as themselves: the
    value, a conditional expression's branches, a registry dict's values. Not a list's or a
    tuple's elements: a list of classes is most often what a type is checked against
    (DeepSpeed's ZERO_SUPPORTED_OPTIMIZERS), a tuple a test's parameters."""
    if isinstance(value, cst.IfExp):
        return [*_bound_values(value.body), *_bound_values(value.orelse)]
    if isinstance(value, cst.Dict):
        return [v for e in value.elements if isinstance(e, cst.DictElement) for v in _bound_values(e.value)]
    return [value]
