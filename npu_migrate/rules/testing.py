"""Runs each rule's own examples: before/after pairs must rewrite exactly (and stay put when
rewritten again), flagged snippets must be reported unchanged, ok snippets left alone. A rule
that reports only beside other rules' matches (only_with) runs with those rules too."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from npu_migrate.discover import file_kind
from npu_migrate.engine.index import RuleIndex
from npu_migrate.engine.kinds import content_of
from npu_migrate.model import Applicability
from npu_migrate.pipeline import handler
from npu_migrate.rules.schema import Example, Rule

ALL_FIXES = frozenset({Applicability.safe, Applicability.unsafe})


@dataclass(frozen=True)
class ExampleFailure:
    rule: Rule
    number: int  # 1-based position in the rule's examples
    problem: str

    def __str__(self) -> str:
        return f"{self.rule.source}: rule {self.rule.code} example {self.number}: {self.problem}"


def companions(rule: Rule, rules: Sequence[Rule]) -> list[Rule]:
    """The rules an example of `rule` needs beside it."""
    return [r for r in rules if r.code in rule.only_with]


def check_example(rule: Rule, example: Example, index: RuleIndex | None = None) -> str | None:
    """None when the example holds, else what went wrong. `index`: the rule and its companions."""
    index = index or RuleIndex([rule])
    code = example.before or example.flagged or example.ok or ""
    kind = file_kind(example.file, b"") if example.file else None
    migrate = handler(kind or content_of(rule.match))  # a shell rule's examples are scripts
    result = migrate(code.encode(), index, ALL_FIXES)
    if result.error:
        return f"example does not parse: {result.error}"
    got = result.new_source.decode() if result.new_source is not None else code
    found = [f for f in result.findings if f.rule.code == rule.code]
    if example.ok is not None:
        if found:  # without a finding of its own, the rule changed nothing
            return f"expected no finding and no change, got {len(found)} finding(s):\n{got}"
        return None
    if not found:
        return "expected a finding, got none"
    if example.flagged is not None:
        return None if not any(f.applied for f in found) else f"expected no change, got:\n{got}"
    if got != example.after:
        return f"expected:\n{example.after}\ngot:\n{got}"
    again = migrate(got.encode(), index, ALL_FIXES)
    if again.new_source is not None:
        return f"not idempotent; a second run gave:\n{again.new_source.decode()}"
    return None


def check_rules(rules: list[Rule]) -> list[ExampleFailure]:
    failures = []
    for rule in rules:
        index = RuleIndex([rule, *companions(rule, rules)])
        for number, example in enumerate(rule.examples, start=1):
            problem = check_example(rule, example, index)
            if problem:
                failures.append(ExampleFailure(rule, number, problem))
    return failures
