"""The rule-file format: validation errors are one line naming file, rule and field; the
published JSON Schema is generated from the models and agrees with them."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from npu_migrate.rules.files import RuleError, builtin_rules_dir
from npu_migrate.rules.load import load_rule_file, load_rules
from npu_migrate.rules.schema import json_schema
from npu_migrate.rules.testing import check_example

from .conftest import ROOT

GOOD_RULE = {
    "code": "HOU901",
    "name": "my-rule",
    "summary": "s",
    "why": "w",
    "message": "m {match}",
    "applicability": "safe",
    "severity": "warning",
    "match": {"method": ["cuda"]},
    "fix": {"rename": {"cuda": "npu"}},
    "examples": [{"before": "x.cuda()\n", "after": "import torch_npu\nx.npu()\n"}],
}


def write_rules(tmp_path: Path, *rules: dict, codes: str = "HOU9xx", name: str = "mine.yaml") -> Path:
    path = tmp_path / name
    path.write_text(
        yaml.safe_dump({"category": "mine", "codes": codes, "description": "d", "rules": list(rules)})
    )
    return path


def error_for(tmp_path: Path, **changes) -> str:
    rule = {k: v for k, v in {**GOOD_RULE, **changes}.items() if v is not None}
    with pytest.raises(RuleError) as info:
        load_rule_file(write_rules(tmp_path, rule))
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_good_rule_file_loads(tmp_path: Path) -> None:
    [rule] = load_rule_file(write_rules(tmp_path, GOOD_RULE)).rules
    assert (rule.code, rule.category, rule.match_kind) == ("HOU901", "mine", "method")


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"message": None}, "rule HOU901: field message: Field required"),
        (
            {"applicability": "maybe"},
            "rule HOU901: field applicability: Input should be 'safe', 'unsafe' or 'manual'",
        ),
        ({"match": {"regex": "x"}}, "rule HOU901: field match: match needs one of: name, call"),
        ({"applicability": "manual"}, "rule HOU901: field (rule): manual rules have no fix"),
        ({"code": "NPU9"}, "rule NPU9: field code: String should match pattern"),
        (
            {
                "match": {"string": "(", "where": [{"assign": ["device"]}]},
                "fix": None,
                "applicability": "manual",
                "examples": [{"flagged": "x"}],
            },
            "field match.string: not a valid regex",
        ),
        ({"examples": [{"before": "x"}]}, "field examples.0: 'before' and 'after' come together"),
        ({"fix": {"rename": {"a": "b"}, "template": "x"}}, "field fix: a fix needs exactly one of"),
        (
            {"match": {"pattern": "f($X"}, "fix": {"template": "g($X)"}},
            "field match.pattern: not a valid pattern",
        ),
        (
            {"match": {"pattern": "f($X)"}, "fix": {"template": "g($Y)"}},
            "the template uses $Y, which the match",
        ),
        (
            {"match": {"pattern": "f($X)"}, "fix": {"template": "g($X)", "helpers": {"g": "def g(x:\n"}}},
            "field fix: helper g does not parse: ",
        ),
        (
            {
                "match": {"pattern": "f($X)"},
                "fix": {"template": "g($X)", "helpers": {"g": "def h(x):\n    pass\n"}},
            },
            "field fix: helper g must be one `def g(...)` or `class g`",
        ),
    ],
)
def test_malformed_rules_fail_in_one_line_naming_file_rule_and_field(
    tmp_path: Path, changes, expected
) -> None:
    message = error_for(tmp_path, **changes)
    assert message.startswith(str(tmp_path / "mine.yaml") + ": ")
    assert expected in message


def test_codes_must_lie_in_the_files_block(tmp_path: Path) -> None:
    with pytest.raises(RuleError, match="rule HOU901 lies outside this file's block NPU1xx"):
        load_rule_file(write_rules(tmp_path, GOOD_RULE, codes="NPU1xx"))


def test_codes_are_unique_across_files(tmp_path: Path) -> None:
    write_rules(tmp_path, GOOD_RULE, name="a.yaml")
    write_rules(tmp_path, GOOD_RULE, name="b.yaml")
    with pytest.raises(RuleError, match=r"b\.yaml: rule HOU901: field code: already defined in .*a\.yaml"):
        load_rules([tmp_path], builtin=False)


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("category: x\nrules: [\n  - a\n")
    with pytest.raises(RuleError, match=r"bad\.yaml:\d+: not valid YAML"):
        load_rule_file(path)


def test_published_schema_is_generated_from_the_models() -> None:
    committed = (ROOT / "npu_migrate" / "rule-schema.json").read_text()
    assert committed == json_schema(), "run: npu-migrate rules schema > npu_migrate/rule-schema.json"


def test_published_schema_accepts_the_catalog_and_rejects_a_broken_rule() -> None:
    schema = json.loads(json_schema())
    for path in sorted(builtin_rules_dir().glob("*.yaml")):
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)
    broken = {
        "category": "x",
        "codes": "HOU9xx",
        "description": "d",
        "rules": [{**GOOD_RULE, "severity": "loud"}],
    }
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_the_example_checker_catches_a_wrong_example(tmp_path: Path) -> None:
    wrong = {**GOOD_RULE, "examples": [{"before": "x.cuda()\n", "after": "x.cuda()\n"}, {"ok": "y.cuda()\n"}]}
    [rule] = load_rule_file(write_rules(tmp_path, wrong)).rules
    assert "expected:" in check_example(rule, rule.examples[0])
    assert "expected no finding" in check_example(rule, rule.examples[1])


def test_rule_docs_are_generated_from_the_rules() -> None:
    from npu_migrate.rules.docs import catalog

    committed = (ROOT / "docs" / "rules.md").read_text()
    assert committed == catalog(load_rules()), "run: npu-migrate rules docs > docs/rules.md"
