"""Rule precedence: a user's rule wins over the catalog on the node both match (and the catalog
finding is counted as overridden), rules of one layer that can match the same node must declare
their order, and `rules test` names the catalog rules a user rule overlaps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from npu_migrate.engine.index import RuleIndex
from npu_migrate.engine.source import migrate_source
from npu_migrate.model import Applicability
from npu_migrate.rules.files import RuleError
from npu_migrate.rules.load import load_rules
from npu_migrate.rules.precedence import undeclared_overlaps

from .conftest import Cli


def rule(code: str, match: dict, **more) -> dict:
    return {
        "code": code,
        "name": f"house-{code.lower()}",
        "summary": "s",
        "why": "w",
        "message": "house: {match}",
        "applicability": "manual",
        "severity": "warning",
        "match": match,
        "examples": [{"flagged": more.pop("flagged", "import torch\ntorch.cuda.synchronize()\n")}],
        **more,
    }


def rule_file(tmp_path: Path, *rules: dict) -> Path:
    path = tmp_path / "house.yaml"
    path.write_text(
        yaml.safe_dump({"category": "house", "codes": "HOU1xx", "description": "d", "rules": list(rules)})
    )
    return path


SYNC = rule("HOU101", {"name": ["torch.cuda.synchronize"]})
CUPY = rule("HOU102", {"import": ["cupy"]}, flagged="import cupy\n")


def codes_found(source: str, rules_path: Path, enabled: frozenset[Applicability] = frozenset()) -> list[str]:
    index = RuleIndex(load_rules([rules_path]))
    return [f.rule.code for f in migrate_source(source.encode(), index, enabled).findings]


def test_a_user_rule_on_a_catalog_name_fires_and_the_catalog_finding_is_overridden(tmp_path: Path) -> None:
    path = rule_file(tmp_path, SYNC)
    index = RuleIndex(load_rules([path]))
    safe = frozenset({Applicability.safe})
    result = migrate_source(
        b"import torch\ntorch.cuda.synchronize()\ntorch.cuda.empty_cache()\n", index, safe
    )
    assert [(f.rule.code, f.line) for f in result.findings] == [("HOU101", 2), ("NPU101", 3)]
    assert result.overridden == ["NPU101"]
    # the user's rule is report-only: the synchronize call is no longer rewritten, empty_cache still is
    assert result.new_source is not None
    assert b"torch.cuda.synchronize()" in result.new_source
    assert b"torch.npu.empty_cache()" in result.new_source


def test_a_user_rule_on_a_catalog_import_fires(tmp_path: Path) -> None:
    assert codes_found("import cupy\n", rule_file(tmp_path, CUPY)) == ["HOU102"]
    assert codes_found("import cupy\n", rule_file(tmp_path, rule("HOU109", {"import": ["triton"]}))) == [
        "NPU807"
    ]


def test_scan_counts_what_user_rules_overrode(tmp_path: Path, cli: Cli) -> None:
    source = tmp_path / "src" / "train.py"
    source.parent.mkdir()
    source.write_text("import torch\nimport cupy\ntorch.cuda.synchronize()\n")
    result = cli("scan", source.parent, "--rules", rule_file(tmp_path, SYNC, CUPY), "--format", "json")
    report = json.loads(result.stdout)
    assert [f["code"] for f in report["findings"]] == ["HOU102", "HOU101"]
    assert report["summary"]["overridden"] == {"NPU101": 1, "NPU807": 1}
    text = cli("scan", source.parent, "--rules", rule_file(tmp_path, SYNC, CUPY)).stdout
    assert "2 catalog finding(s) overridden by your rules: NPU101 (1), NPU807 (1)" in text


def test_an_undeclared_overlap_in_one_layer_is_a_load_error_naming_both(tmp_path: Path) -> None:
    other = rule("HOU103", {"name": ["torch.cuda.synchronize"]})
    with pytest.raises(RuleError) as info:
        load_rules([rule_file(tmp_path, SYNC, other)])
    message = str(info.value)
    assert "HOU103" in message and "HOU101" in message and "supersedes" in message
    assert "\n" not in message


def test_a_declared_order_loads_and_decides(tmp_path: Path) -> None:
    other = rule("HOU103", {"name": ["torch.cuda.synchronize"]}, supersedes=["HOU101"])
    assert codes_found("import torch\ntorch.cuda.synchronize()\n", rule_file(tmp_path, SYNC, other)) == [
        "HOU103"
    ]


def test_supersedes_must_name_a_rule(tmp_path: Path) -> None:
    with pytest.raises(RuleError, match="field supersedes: no rule HOU999"):
        load_rules([rule_file(tmp_path, rule("HOU101", {"import": ["cupy"]}, supersedes=["HOU999"]))])


@pytest.mark.parametrize(
    ("first", "second", "overlap"),
    [
        (
            {"string": "cuda", "where": [{"assign": ["device"]}]},
            {"string": "cuda:?\\d*", "where": [{"assign": ["dev*"]}]},
            True,
        ),
        (
            {"string": "cuda", "where": [{"assign": ["device"]}]},
            {"string": "cuda", "where": [{"param": ["device"]}]},
            False,
        ),
        ({"pattern": "$X * torch.rsqrt($Y)"}, {"pattern": "$A * $B"}, True),
        ({"pattern": "$X * torch.rsqrt($Y)"}, {"pattern": "$A + $B"}, False),
        ({"call": ["torch.load"]}, {"pattern": "torch.load($F, map_location=$M)"}, True),
        ({"method": ["cuda"]}, {"attribute": ["cuda"]}, False),
    ],
)
def test_overlap_detection_by_kind(tmp_path: Path, first: dict, second: dict, overlap: bool) -> None:
    flagged = 'device = "cuda"\n'
    rules = rule_file(
        tmp_path, rule("HOU101", first, flagged=flagged), rule("HOU102", second, flagged=flagged)
    )
    if overlap:
        with pytest.raises(RuleError, match="HOU102 can match the same code as HOU101"):
            load_rules([rules])
    else:
        load_rules([rules])


def test_the_catalog_declares_its_overlaps() -> None:
    """The SDPA rewrites win over the generic SDPA report, and every pair of the catalog's rules
    that can match the same node declares its order (loading checks user rules' pairs only)."""
    rules = {r.code: r for r in load_rules()}
    assert {"NPU902", "NPU950", "NPU903"} <= set(rules["NPU901"].supersedes)
    assert [r.code for r in load_rules()] == sorted(rules)
    assert undeclared_overlaps(rules.values()) == []


def test_rules_test_lists_the_catalog_rules_a_user_rule_overlaps(tmp_path: Path, cli: Cli) -> None:
    result = cli("rules", "test", rule_file(tmp_path, SYNC, CUPY))
    assert result.exit_code == 0, result.stdout
    assert (
        "HOU101 overlaps catalog rule NPU101 (torch-cuda-namespace): yours wins where both match"
        in result.stdout
    )
    assert "HOU102 overlaps catalog rule NPU807" in result.stdout
    assert "2 passed, 0 failed" in result.stdout


def test_rules_list_and_docs_are_ordered_by_code(cli: Cli) -> None:
    listed = [
        line.split()[1] for line in cli("rules", "list").stdout.splitlines() if line.startswith("│ NPU")
    ]
    assert listed == sorted(listed) and listed[0] == "NPU101"


@pytest.mark.parametrize(
    ("source", "codes"),
    [
        ("import fused_layer_norm_cuda\n", ["NPU850"]),  # named: the rule that names its replacement
        ("import scaled_masked_softmax_cuda as smc\n", ["NPU846"]),
        ("import my_kernels_cuda\n", ["NPU853"]),  # any other module of that form
        ("from . import roi_align_cuda\n", ["NPU853"]),  # a package's module, its package unknown
        ("from .csrc.roi_align_cuda import forward\n", ["NPU853"]),
        ("from transformers.utils import is_torch_cuda_available\n", ["NPU114"]),  # a function
    ],
)
def test_a_report_on_a_module_name_beats_the_report_on_the_import_around_it(
    source: str, codes: list[str]
) -> None:
    """NPU853 (an import of any `*_cuda*` module) is about the whole import statement; a rule
    about the module's own name inside it supersedes it, from inside."""
    result = migrate_source(source.encode(), RuleIndex(load_rules()), frozenset())
    assert [f.rule.code for f in result.findings] == codes
