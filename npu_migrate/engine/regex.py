"""Rule regexes are matched by RE2, whose time is linear in the text: a rule file cannot stall a
run with a pattern such as `(a+)+b`, on which Python's backtracking `re` takes exponential time.
RE2 has no lookaround or backreferences, and its `\\w`, `\\d` and `\\b` are ASCII."""

from __future__ import annotations

import functools
from typing import Protocol, cast

import re2

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a bad pattern is reported by the rule loader, not logged to stderr


class RuleMatch(Protocol):
    def start(self) -> int: ...


class RuleRegex(Protocol):
    """What the engine uses of a compiled RE2 regex (the package has no type hints)."""

    pattern: str

    def search(self, text: str, pos: int | None = None) -> RuleMatch | None: ...
    def match(self, text: str, pos: int | None = None) -> RuleMatch | None: ...
    def fullmatch(self, text: str) -> RuleMatch | None: ...
    def sub(self, repl: str, text: str) -> str: ...


@functools.cache
def compile_rule_regex(pattern: str) -> RuleRegex:
    """The compiled regex; ValueError with RE2's reason when it has none."""
    try:
        return cast(RuleRegex, re2.compile(pattern, _OPTIONS))
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode(errors="replace")
        raise ValueError(f"not a valid regex: {reason}") from None
