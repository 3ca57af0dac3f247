"""A rule set made ready for matching: every match kind built once over its rules (shared by
all files of a run), and what they tell the prefilter and the region finder."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from npu_migrate.engine.kinds import KINDS, Kind
from npu_migrate.engine.kinds.name import NameKind
from npu_migrate.engine.regions import Anchors
from npu_migrate.prefilter import Prefilter

if TYPE_CHECKING:
    from npu_migrate.rules.schema import Rule


class RuleIndex:
    def __init__(self, rules: Sequence[Rule], silenced: frozenset[str] = frozenset()) -> None:
        self.rules = list(rules)
        self.silenced = silenced  # codes whose findings the configuration leaves out (RuleSource)
        # torch_npu's fused operators: no use in a file of another framework (ImportTable)
        self.fused = frozenset(rule.code for rule in self.rules if rule.category == "fused")
        self.kinds: list[Kind] = [kind(self.rules) for kind in KINDS]
        self.names = next(
            k for k in self.kinds if isinstance(k, NameKind)
        )  # imports are planned by name rules
        self.prefilter = Prefilter()
        self.anchors = Anchors()
        for kind in self.kinds:
            kind.need(self.prefilter)
            kind.anchor(self.anchors)

    def may_match(self, text: str) -> bool:
        """False when no rule can possibly match: the file need not be parsed."""
        return self.prefilter.may_match(text)
