"""`attribute:` rules: an attribute read on any receiver (`t.is_cuda`), renamed in place."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import libcst as cst
from pydantic import Field

from npu_migrate.engine.fixes import renamed_attribute
from npu_migrate.engine.kinds.base import Candidate, Kind, Matcher
from npu_migrate.engine.regions import Anchors, Token
from npu_migrate.prefilter import Prefilter, accessed
from npu_migrate.rules.base import Names, Strict

if TYPE_CHECKING:
    from npu_migrate.engine.context import FileContext
    from npu_migrate.rules.schema import Rule


class AttributeMatch(Strict):
    attribute: Names = Field(description="Attribute names read on any receiver, e.g. 'is_cuda'.")


class AttributeKind(Kind[AttributeMatch]):
    key = "attribute"
    schema = AttributeMatch
    fixes = frozenset({"rename"})

    def __init__(self, rules: Sequence[Rule]) -> None:
        super().__init__(rules)
        self.by_name: dict[str, list[Rule]] = defaultdict(list)
        for rule, match in self.entries:
            for name in match.attribute:
                self.by_name[name].append(rule)

    @staticmethod
    def keys(match: AttributeMatch) -> set[str]:
        return {f"attribute:{name}" for name in match.attribute}

    def need(self, prefilter: Prefilter) -> None:
        for name in self.by_name:
            prefilter.need(frozenset([accessed(name)]))

    def anchor(self, anchors: Anchors) -> None:
        for _, match in self.entries:
            anchors.rule([Token.word(name) for name in match.attribute])

    def matcher(self, ctx: FileContext) -> AttributeMatcher:
        return AttributeMatcher(ctx, self)


class AttributeMatcher(Matcher):
    def __init__(self, ctx: FileContext, kind: AttributeKind) -> None:
        super().__init__(ctx)
        self.by_name = kind.by_name

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> list[Candidate]:
        rules = self.by_name.get(updated.attr.value, ())
        return [Candidate(r, renamed_attribute(r, updated), part=f".{updated.attr.value}") for r in rules]
