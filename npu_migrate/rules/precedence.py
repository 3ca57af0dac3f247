"""Which overlaps a rule set must declare: two rules of one layer that can match the same node
with no order between them (engine.precedence: a user's rule beats the catalog, then
`supersedes`, then the more specific name) is a load error."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING

from npu_migrate.engine.kinds import kind_of

if TYPE_CHECKING:
    from npu_migrate.engine.kinds.base import Kind
    from npu_migrate.rules.schema import Rule


def can_overlap(a: Rule, b: Rule) -> bool:
    """Whether two rules can match the same node (by their kinds' keys; within a kind, by the
    kind's own test)."""
    return _can_overlap(_Keyed.of(a), _Keyed.of(b))


@dataclass(frozen=True)
class _Keyed:
    """A rule with its kind and overlap keys, worked out once for all the pairs it is in."""

    rule: Rule
    kind: type[Kind]
    keys: set[str]

    @classmethod
    def of(cls, rule: Rule) -> _Keyed:
        kind = kind_of(rule.match)
        return cls(rule, kind, kind.keys(rule.match))


def _can_overlap(a: _Keyed, b: _Keyed) -> bool:
    if a.kind is b.kind:
        return a.kind.overlaps(a.rule, b.rule)
    return bool(a.keys & b.keys)


def undeclared_overlaps(rules: Iterable[Rule]) -> list[tuple[Rule, Rule]]:
    """Pairs of rules in one layer that can match the same node without a declared order."""
    found = []
    for a, b in combinations(map(_Keyed.of, rules), 2):
        if (
            a.rule.builtin != b.rule.builtin
            or a.rule.code in b.rule.supersedes
            or b.rule.code in a.rule.supersedes
        ):
            continue
        if _can_overlap(a, b):
            found.append((a.rule, b.rule))
    return found


def overlapped_catalog(rule: Rule, catalog: Iterable[Rule]) -> list[Rule]:
    """The catalog rules a user rule can match the same node as (and so wins over)."""
    return [other for other in catalog if can_overlap(rule, other)]
