"""`call:` rules: calls of a qualified callee (resolved through imports), with conditions on
the arguments, and the fixes that edit a call: rename the callee, edit keywords, or rewrite the
call from a template whose metavariables are the callee's parameters."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, cast

import libcst as cst
from pydantic import AfterValidator, Field

from npu_migrate.engine.bindings import Bindings, module_scope
from npu_migrate.engine.fixes import chain_source, edit_keywords, filled_guard, framed, replace_expression
from npu_migrate.engine.holds import subtree
from npu_migrate.engine.imports import renamed
from npu_migrate.engine.kinds.arguments import callee, conditions_hold, fits, mappings, passed
from npu_migrate.engine.kinds.base import Candidate, Kind, Matcher
from npu_migrate.engine.kinds.fields import ArgCondition, QualifiedNames, Strict
from npu_migrate.engine.kinds.pattern import parses
from npu_migrate.engine.names import NameTable, dotted_parts
from npu_migrate.engine.patterns import Pattern, code_of, fill
from npu_migrate.engine.regions import CALLED, Anchors, Token
from npu_migrate.prefilter import Prefilter, components

if TYPE_CHECKING:
    from npu_migrate.engine.context import FileContext
    from npu_migrate.rules.schema import Rule


TORCH_DTYPES = frozenset(
    f"torch.{name}"
    for name in (
        "float16", "float32", "float64", "bfloat16", "half", "float", "double", "int8", "int16",
        "int32", "int64", "long", "int", "uint8", "bool", "complex64", "complex128",
    )
)  # fmt: skip


class CallMatch(Strict):
    call: QualifiedNames = Field(description="Qualified callee names, resolved through imports.")
    signature: list[str] = Field(default_factory=list, description="Positional parameter names.")
    args: dict[str, ArgCondition] = Field(
        default_factory=dict, description="Conditions on arguments, by parameter name."
    )
    strict: bool = Field(
        default=False,
        description="Match only calls whose arguments all fit `signature` (no other keywords, "
        "no *args or **kwargs): what a fix does not know, it must not drop.",
    )
    passes_mapping: bool = Field(
        default=False,
        description="A `**kwargs` the call passes is let through `strict` and passed on, last, by "
        "the template's call: for a new callee that takes the old one's keywords and refuses, "
        "loudly, any it does not. The mapping may carry any parameter, so `present: true` holds "
        "and a template with `defaults` (standing for an absent argument) is not filled.",
    )
    unless_fallback_of: list[Annotated[str, AfterValidator(parses)]] = Field(
        default_factory=list,
        description="Tests over the parameters ($attn_mask is None) under which the call is already "
        "the fallback: a call that is the `else` of a conditional expression whose test matches one "
        "is left alone (what a fix `fused if $attn_mask is None else <the call>` writes).",
    )
    moved_by: list[str] = Field(
        default_factory=list,
        description="Methods that move a value to a device (`cuda`, `npu`, `to` naming a device, "
        "not only a dtype): the call matches only where its result is moved by one of them, at "
        "once (`torch.zeros(3, dtype=torch.float64).cuda()`) or later through the name it is "
        "assigned to, while that name still holds it (`acc = torch.zeros(...)`, then "
        "`acc = acc.to(device)` in the same function or script), what it makes being on the "
        "device as surely as with `device=`.",
    )


# a name -> the calls of its methods (`x.cuda()`), each with the statement line that holds it
_MethodCalls = dict[str, list[tuple[cst.Call, cst.CSTNode]]]


class CallMatcher(Matcher):
    kind: CallKind

    def __init__(self, ctx: FileContext, kind: CallKind) -> None:
        super().__init__(ctx, kind)
        self.moved: dict[cst.Call, str] = {}  # a call whose result a method moves at once -> that method
        # per scope: each name -> the method calls on it (`x.cuda()`), found in one walk of the
        # scope (a walk per call made module-level code quadratic); the scope is kept with them
        self._methods_called: dict[int, tuple[cst.CSTNode, _MethodCalls]] = {}
        self._values_reaching: dict[cst.Call, set[int]] = {}  # a move -> the ids of what it may move

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Attribute) and isinstance(node.func.value, cst.Call):
            method = node.func.attr.value
            if method != "to" or self._to_a_device(node):
                self.moved[node.func.value] = method

    def _to_a_device(self, call: cst.Call) -> bool:
        """Whether a `.to(...)` names an accelerator (`.to(device)`, `.to("cuda")`, `device=`),
        not only a dtype (`.to(torch.float32)`, `dtype=`) or the host (`.to("cpu")`)."""
        positional = [a.value for a in call.args if a.keyword is None and not a.star]
        if positional and isinstance(positional[0], cst.SimpleString):
            return not str(positional[0].evaluated_value).startswith("cpu")
        if positional:
            parts = dotted_parts(positional[0])
            return (self.ctx.table.qualify(parts) if parts else None) not in TORCH_DTYPES
        return any(a.keyword is not None and a.keyword.value == "device" for a in call.args)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> list[Candidate]:
        qualified = callee(self.ctx, original)
        if qualified is None:
            return []
        candidates = []
        kept = self._kept_by_guard(original, qualified)
        for rule, specificity in self.kind.table.rules_for(qualified):
            if rule.code in kept:
                continue
            match = cast(CallMatch, rule.match)
            if match.moved_by and not self._moved(original, match.moved_by):
                continue
            if match.strict and not fits(original, match.signature, match.passes_mapping):
                continue
            if not conditions_hold(self.ctx, original, match.args, match.signature, match.passes_mapping):
                continue
            if match.unless_fallback_of and self._already_fallback(match, original):
                continue
            fixed, imports = self._fixed(rule, match, qualified, original, updated)
            candidates.append(Candidate(rule, fixed, imports, specificity=specificity))
        return candidates

    def _kept_by_guard(self, original: cst.Call, qualified: str) -> set[str]:
        """The rules a guarded fix already answered for this call, which it kept as its fallback
        (`... if why_not_npu_x(...) is None else <this call>`): that rule's, and those it
        supersedes (a report that the call was not fused)."""
        kept: set[str] = set()
        for rule, _ in self.kind.table.rules_for(qualified):
            if rule.fix and rule.fix.guard and self.ctx.facts.kept_by_guard(original, rule.fix.guard):
                kept |= {rule.code, *rule.supersedes}
        return kept

    def _moved(self, original: cst.Call, methods: list[str]) -> bool:
        """Whether one of `methods` moves the call's result to a device: at once, or later through
        the name a plain assignment gives it, where that assignment is among the name's bindings
        that reach the move (`acc = acc.float()` in between hides it)."""
        if self.moved.get(original) in methods:
            return True
        line = self.ctx.facts.line
        target = _assigned(line, original) if line is not None else None
        if target is None:
            return False
        functions = self.ctx.facts.functions
        scope = functions[-1] if functions else module_scope(self.ctx.module)
        for node, statement in self._methods_called_on(scope).get(target, []):
            if node.func.attr.value not in methods or (  # type: ignore[attr-defined]
                node.func.attr.value == "to" and not self._to_a_device(node)  # type: ignore[attr-defined]
            ):
                continue
            if id(original) in self._reaching(scope, statement, node, target):
                return True
        return False

    def _reaching(self, scope: cst.CSTNode, statement: cst.CSTNode, move: cst.Call, name: str) -> set[int]:
        """The values (their ids) of `name`'s bindings that reach `move`, once per move (each
        call a rule may move asks of every move of the name)."""
        if move not in self._values_reaching:
            reaching = Bindings(cast(cst.FunctionDef, scope), statement).reaching(name)
            self._values_reaching[move] = {id(b.value) for b in reaching if b.value is not None}
        return self._values_reaching[move]

    def _methods_called_on(self, scope: cst.CSTNode) -> _MethodCalls:
        """Each name in `scope` -> the calls of its methods there (`name.method(...)`), in order,
        each with the statement line that holds it (the call itself outside one: an `if`'s test)."""
        kept = self._methods_called.get(id(scope))
        if kept is not None and kept[0] is scope:
            return kept[1]
        line_of: dict[int, cst.CSTNode] = {}
        for statement in subtree(scope.body):  # type: ignore[attr-defined]
            if isinstance(statement, cst.SimpleStatementLine):
                line_of.update((id(node), statement) for node in subtree(statement))
        calls: _MethodCalls = {}
        for node in subtree(scope.body):  # type: ignore[attr-defined]
            if (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Attribute)
                and isinstance(node.func.value, cst.Name)
            ):
                calls.setdefault(node.func.value.value, []).append((node, line_of.get(id(node), node)))
        self._methods_called[id(scope)] = (scope, calls)
        return calls

    def _already_fallback(self, match: CallMatch, original: cst.Call) -> bool:
        conditional = self.ctx.facts.fallback_of(original)
        if conditional is None:
            return False
        values = passed(original, match.signature, match.signature)
        return any(
            Pattern.compile(test).match(conditional.test, self.ctx.table.qualify, dict(values)) is not None
            for test in match.unless_fallback_of
        )

    def _fixed(
        self, rule: Rule, match: CallMatch, qualified: str, original: cst.Call, updated: cst.Call
    ) -> tuple[cst.BaseExpression | None, tuple[str, ...]]:
        """The fixed call and the modules the fix needs; None for a report-only rule."""
        fix = rule.fix
        if fix and fix.keywords:
            return edit_keywords(updated, fix.keywords), ()
        if fix and fix.rename and (new := renamed(qualified, fix.rename)):
            parts = dotted_parts(original.func) or []
            source, module = chain_source(parts, new, self.ctx.table, self.ctx.plan)
            return updated.with_changes(func=replace_expression(updated.func, source)), (
                module,
            ) if module else ()
        if fix and fix.template:
            mapped = mappings(updated) if match.passes_mapping else []
            if mapped and fix.defaults:
                return None, ()  # the mapping may or may not carry what a default stands for
            given = passed(updated, {*match.signature, *match.args}, match.signature)
            codes = {name: code_of(value, self.ctx.module) for name, value in given.items()}
            try:
                needed: list[str] = []
                for name, default in fix.defaults.items():
                    if codes.get(name, "None") == "None":  # None means the default, as absent
                        node, more = fill(default, codes, self.ctx.table.spell)
                        codes[name], needed = code_of(node, self.ctx.module), needed + more
                node, more = fill(fix.template, codes, self.ctx.table.spell)
                if fix.guard:
                    node, guard_needs = filled_guard(fix.guard, node, updated, codes, self.ctx.table.spell)
                    more = [*more, *guard_needs]
            except ValueError:
                return None, ()  # an argument the template needs is missing: report only
            if mapped:
                if not isinstance(node, cst.Call):
                    return None, ()  # nowhere to pass the mapping on: report only
                node = node.with_changes(
                    args=(*node.args, *(a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in mapped))
                )
            assert isinstance(node, cst.BaseExpression)
            return framed(node, updated), (*needed, *more)
        return None, ()


_ASSIGNMENTS = (ast.Assign, ast.AnnAssign)


def _assigned(line: cst.SimpleStatementLine, value: cst.BaseExpression) -> str | None:
    """The plain name `line` assigns `value` to (`acc = value`, `acc: Tensor = value`), if any."""
    for statement in line.body:
        if isinstance(statement, cst.Assign) and statement.value is value:
            targets = [t.target for t in statement.targets]
        elif isinstance(statement, cst.AnnAssign) and statement.value is value:
            targets = [statement.target]
        else:
            continue
        return next((t.value for t in targets if isinstance(t, cst.Name)), None)
    return None


class CallKind(Kind[CallMatch]):
    key = "call"
    schema = CallMatch
    matcher_type = CallMatcher
    fixes = frozenset({"rename", "template", "keywords"})

    def __init__(self, rules: Sequence[Rule]) -> None:
        super().__init__(rules)
        self.table = NameTable.of((rule, name) for rule, match in self.entries for name in match.call)

    @staticmethod
    def bindable(match: CallMatch) -> set[str]:
        return set(match.signature) | set(match.args)

    @staticmethod
    def keys(match: CallMatch) -> set[str]:
        return {f"call:{name}" for name in match.call}

    def need(self, prefilter: Prefilter) -> None:
        for _, match in self.entries:
            needs = [frozenset[str]()]  # for each way the name conditions can hold, the words it needs
            for condition in match.args.values():
                if condition.name:
                    needs = [n | components(name) for n in needs for name in condition.name]
            for name in match.call:
                prefilter.need(*(components(name) | extra for extra in needs))

    def anchor(self, anchors: Anchors) -> None:
        """A condition on an argument's string or name is spelled in every match, and is often
        rarer than the callee (`dtype=torch.float64` of `torch.zeros`). A move is looked for
        through a name in the whole function or script (a function rule's region)."""
        for _, match in self.entries:
            alternatives = [[Token.name(callee, CALLED) for callee in match.call]]
            for condition in match.args.values():
                if condition.string:
                    alternatives.append([Token.regex(condition.string)])
                if condition.name:
                    alternatives.append([Token.name(n) for n in condition.name])
            moved = bool(match.moved_by)  # through a name: what a plain assignment gives (_assigned)
            anchors.rule(*alternatives, function=moved, only_at=_ASSIGNMENTS if moved else ())
