"""What the match kinds of files that are not Python share: they match at a handler's sites
(engine/sites.py), never in a Python file."""

from __future__ import annotations

from functools import cache

from npu_migrate.engine.kinds.base import Kind, Matcher
from npu_migrate.engine.regex import RuleRegex, compile_rule_regex
from npu_migrate.prefilter import Prefilter


class SiteKind(Kind):
    """A kind whose rules match at the sites of a file that is not Python (engine/sites.py): no
    Python file holds its match, so there is nothing for the prefilter or the regions."""

    matcher_type = Matcher

    def need(self, prefilter: Prefilter) -> None:
        return None

    def anchor(self, anchors: object) -> None:
        return None


@cache
def _compiled(pattern: str) -> RuleRegex:
    return compile_rule_regex(pattern)


def full_match(pattern: str, text: str) -> bool:
    """Whether a rule's regex (compiled once per run, not at every site) matches all of text."""
    return bool(_compiled(pattern).fullmatch(text))


def found(pattern: str, text: str) -> bool:
    """Whether a rule's regex matches somewhere in text."""
    return bool(_compiled(pattern).search(text))
