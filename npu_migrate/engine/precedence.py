"""Which rule wins when several match the same node: a user's rule beats the catalog; between
rules of one layer, a rule beats those it declares in `supersedes`, then a rule on a more
specific name beats one on a prefix (rules.precedence makes a rule set declare the rest)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from npu_migrate.engine.kinds.base import Candidate


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
