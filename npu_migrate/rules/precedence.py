"""Which rule wins when several match the same node, and which overlaps a rule set must
declare. A user's rule beats the catalog; between rules of one layer, a rule beats those it
declares in `supersedes`, then a rule on a more specific name beats one on a prefix. Two rules
of one layer that can match the same node with neither order is a load error."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import combinations
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from npu_migrate.engine.kinds.base import Candidate
    from npu_migrate.rules.schema import Rule


def compare(a: Candidate, b: Candidate) -> int:
    """Negative when `a` beats `b`. The last two steps only order what the rule set cannot
    (rules of different kinds on different parts of a node): a fix before a report, then code."""
    if a.rule.builtin != b.rule.builtin:
        return -1 if b.rule.builtin else 1
    if b.rule.code in a.rule.supersedes:
        return -1
    if a.rule.code in b.rule.supersedes:
        return 1
    if a.specificity != b.specificity:
        return b.specificity - a.specificity
    if (a.fixed is None) != (b.fixed is None):
        return -1 if b.fixed is None else 1
    return (a.rule.code > b.rule.code) - (a.rule.code < b.rule.code)


def can_overlap(a: Rule, b: Rule) -> bool:
    """Whether two rules can match the same node (by their kinds' keys; within a kind, by the
    kind's own test)."""
    from npu_migrate.engine.kinds import kind_of

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
