"""Every example in every built-in rule file, opt-in sets included, is a test: nothing is
registered by hand."""

from __future__ import annotations

import pytest

from npu_migrate.engine.index import RuleIndex
from npu_migrate.rules.files import opt_in_sets
from npu_migrate.rules.load import load_rules
from npu_migrate.rules.testing import check_example, companions

RULES = load_rules(opt_in_sets().values())
CASES = [
    pytest.param(rule, example, id=f"{rule.code}-{rule.name}-{number}")
    for rule in RULES
    for number, example in enumerate(rule.examples, start=1)
]


@pytest.mark.parametrize(("rule", "example"), CASES)
def test_rule_example(rule, example) -> None:
    problem = check_example(rule, example, RuleIndex([rule, *companions(rule, RULES)]))
    assert problem is None, problem


def test_the_opt_in_sets_are_found_by_name() -> None:
    assert "npu-fused-optimizers" in opt_in_sets()
    assert {r.code for r in RULES} >= {"NPU941", "NPU946"}


def test_catalog_is_not_trivially_small() -> None:
    rules = load_rules()
    assert len(rules) >= 30
    assert {r.category for r in rules} >= {
        "device",
        "distributed",
        "amp",
        "precision",
        "profiler",
        "env",
        "unsupported",
    }
