"""Which overlaps a rule set must declare: two rules of one layer that can match the same node
with no order between them (engine.precedence: a user's rule beats the catalog, then
`supersedes`, then the more specific name) is a load error."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import combinations
from typing import TYPE_CHECKING

from npu_migrate.engine.kinds import kind_of

if TYPE_CHECKING:
    from npu_migrate.rules.schema import Rule


def can_overlap(a: Rule, b: Rule) -> bool:
    """Whether two rules can match the same node (by their kinds' keys; within a kind, by the
    kind's own test)."""
    kind_a, kind_b = kind_of(a.match), kind_of(b.match)
    if kind_a is kind_b:
        return kind_a.overlaps(a, b)
    return bool(kind_a.keys(a.match) & kind_b.keys(b.match))


def undeclared_overlaps(rules: Iterable[Rule]) -> list[tuple[Rule, Rule]]:
    """Pairs of rules in one layer that can match the same node without a declared order."""
    found = []
    for a, b in combinations(rules, 2):
        if a.builtin != b.builtin or a.code in b.supersedes or b.code in a.supersedes:
            continue
        if can_overlap(a, b):
            found.append((a, b))
    return found


def overlapped_catalog(rule: Rule, catalog: Iterable[Rule]) -> list[Rule]:
    """The catalog rules a user rule can match the same node as (and so wins over)."""
    return [other for other in catalog if can_overlap(rule, other)]
