"""The engine's own regular expressions take linear time on adversarial text (tests/regex_audit.py
times each the way the code calls it); and the audit sees what it guards against: patterns this
project once shipped, exponential or quadratic, are caught, their linear rewrites pass."""

from __future__ import annotations

import re

from tests.regex_audit import Audited, audit, patterns

SEARCH = frozenset({"finditer"})


def test_every_regex_the_scanner_and_rewriter_use_takes_linear_time() -> None:
    found = patterns()
    assert len(found) >= 70, "the audit finds the engine's patterns"
    assert {"match", "fullmatch", "finditer"} <= {m for a in found for m in a.methods}
    _, tried, slow = audit(found)
    assert tried > 10_000
    assert [(s.audited.where, s.audited.pattern.pattern, s.text) for s in slow] == []


def control(pattern: str | bytes, flags: int = 0) -> Audited:
    return Audited(re.compile(pattern, flags), repr(pattern), SEARCH)


def test_the_audit_catches_exponential_and_quadratic_patterns_and_passes_their_repairs() -> None:
    shipped = [
        control(rb"__global__\s+(?:[\w:<>,*&\s]+?\s)?[*&\s]*(\w+)\s*(?:<[^;{()]*>\s*)?\("),  # spaces, 3 ways
        control(r"(^|\s+)#"),  # requirements' comment: a long run of spaces
        control(r"^\s*\[\s*tool\s*\.\s*[\"']?npu-migrate\b", re.MULTILINE),  # a run of blank lines
        control(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*|/\*.*?\*/', re.DOTALL),  # JSONC: quotes never closed
    ]
    repaired = [
        control(rb"__global__\b[^;{()]*?(\w+)\s*(?:<[^;{()]*>\s*)?\("),
        control(r"(?:^|(?<=\s))#"),
        control(r"^[ \t]*\[[ \t]*tool[ \t]*\.[ \t]*[\"']?npu-migrate\b", re.MULTILINE),
        control(r'"(?:[^"\\\n]|\\.)*"?|//[^\n]*|/\*.*?(?:\*/|\Z)', re.DOTALL),
    ]
    _, _, slow = audit(shipped + repaired)
    assert {s.audited.where for s in slow} == {a.where for a in shipped}
