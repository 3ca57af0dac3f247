"""`method:` rules: a method called on any receiver that is not an imported module
(`t.cuda()`, `model.cuda(0)`), with an optional signature that tells it from other classes'
methods of the same name, and conditions on its arguments."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import libcst as cst
from pydantic import Field

from npu_migrate.engine.fixes import edit_keywords, renamed_attribute
from npu_migrate.engine.kinds.arguments import conditions_hold, fits
from npu_migrate.engine.kinds.base import Candidate, Kind, Matcher, by_name
from npu_migrate.engine.kinds.fields import ArgCondition, PlainNames, Strict
from npu_migrate.engine.names import dotted_parts
from npu_migrate.engine.regions import CALLED, Anchors, Token
from npu_migrate.prefilter import Prefilter, accessed

if TYPE_CHECKING:
    from npu_migrate.rules.schema import Rule


class MethodMatch(Strict):
    method: PlainNames = Field(description="Method names called on any receiver, e.g. 'cuda'.")
    signature: list[str] | None = Field(
        default=None,
        description="The method's parameters: a call passing other keywords, or more positional "
        "arguments, is some other class's method of the same name and is left alone.",
    )
    args: dict[str, ArgCondition] = Field(
        default_factory=dict, description="Conditions on arguments, by parameter name (see signature)."
    )


class MethodMatcher(Matcher):
    kind: MethodKind

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> list[Candidate]:
        if not isinstance(updated.func, cst.Attribute) or not isinstance(original.func, cst.Attribute):
            return []
        rules = self.kind.by_name.get(updated.func.attr.value)
        if not rules:
            return []
        receiver = dotted_parts(original.func.value)
        if receiver and self.ctx.table.qualify(receiver):
            return []  # `module.function(...)` is not a method call
        candidates = []
        for rule in rules:
            match = cast(MethodMatch, rule.match)
            if match.signature is not None and not fits(original, match.signature):
                continue
            if not conditions_hold(self.ctx, original, match.args, match.signature or []):
                continue
            candidates.append(Candidate(rule, _fixed(rule, updated), attribute=updated.func.attr.value))
        return candidates


def _fixed(rule: Rule, call: cst.Call) -> cst.Call | None:
    """The call with its method renamed or its keywords edited (`pipe.enable_model_cpu_offload()`
    given the device its library would otherwise take as CUDA); None where the rule has no fix."""
    if rule.fix is not None and rule.fix.keywords is not None:
        return edit_keywords(call, rule.fix.keywords)
    new_func = renamed_attribute(rule, cast(cst.Attribute, call.func))
    return call.with_changes(func=new_func) if new_func else None


class MethodKind(Kind[MethodMatch]):
    key = "method"
    schema = MethodMatch
    matcher_type = MethodMatcher
    fixes = frozenset({"rename", "keywords"})

    def __init__(self, rules: Sequence[Rule]) -> None:
        super().__init__(rules)
        self.by_name = by_name((rule, name) for rule, match in self.entries for name in match.method)

    @staticmethod
    def keys(match: MethodMatch) -> set[str]:
        return {f"method:{name}" for name in match.method}

    def need(self, prefilter: Prefilter) -> None:
        for name in self.by_name:
            prefilter.need(frozenset([accessed(name)]))

    def anchor(self, anchors: Anchors) -> None:
        for _, match in self.entries:
            anchors.rule([Token.word(name, CALLED) for name in match.method])
