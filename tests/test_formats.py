"""scan's output formats through the command line: each one's shape as the CI system that reads
it expects, several in one run, files written whole, and fingerprints that survive edits above."""

from __future__ import annotations

import csv
import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.fixture_cases import run_cli
from tests.test_cli import CUDA_FILE, project

ODD_NAME = "odd, name: 100%.py"  # what GitHub's workflow commands must escape
NOTE_ONLY = "import torch.nn as nn\n\nact = nn.GELU()\n"


def scan(root: Path, *args: str | Path) -> tuple[int, str, str]:
    result = run_cli("scan", ".", *args, cwd=root)
    return result.returncode, result.stdout, result.stderr


def test_sarif_has_rules_regions_fingerprints_and_fixes(tmp_path: Path) -> None:
    root = project(tmp_path, {"cuda.py": CUDA_FILE, "note.py": NOTE_ONLY})
    code, out, _ = scan(root, "--format", "sarif")
    assert code == 1
    run = json.loads(out)["runs"][0]
    rules = {rule["id"]: rule for rule in run["tool"]["driver"]["rules"]}
    results = run["results"]
    assert sorted(r["ruleId"] for r in results) == ["NPU101", "NPU103", "NPU908"]
    assert "What it does" in rules["NPU103"]["help"]["markdown"]
    first = next(r for r in results if r["ruleId"] == "NPU103")
    location = first["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "cuda.py"
    assert location["region"] == {"startLine": 3, "startColumn": 5, "endLine": 3, "endColumn": 26}
    fix = first["fixes"][0]["artifactChanges"][0]["replacements"][0]
    assert fix["deletedRegion"] == location["region"]
    assert fix["insertedContent"]["text"] == "torch.zeros(2).npu()"
    note = next(r for r in results if r["ruleId"] == "NPU908")
    assert note["level"] == "note" and note["kind"] == "informational" and "fixes" not in note
    assert run["tool"]["driver"]["rules"][first["ruleIndex"]]["id"] == "NPU103"


def test_github_annotations_escape_what_workflow_commands_reserve(tmp_path: Path) -> None:
    root = project(tmp_path, {ODD_NAME: CUDA_FILE})
    code, out, _ = scan(root, "--format", "github")
    lines = out.splitlines()
    assert code == 1 and len(lines) == 2
    assert lines[0].startswith("::error file=odd%2C name%3A 100%25.py,line=3,col=5,endLine=3,endColumn=26,")
    assert lines[0].endswith("title=NPU103 [safe]::`torch.zeros(2).cuda()` moves data to CUDA; use .npu()")


def test_gitlab_code_quality_and_junit_and_csv(tmp_path: Path) -> None:
    root = project(tmp_path, {"cuda.py": CUDA_FILE, "note.py": NOTE_ONLY})
    _, out, _ = scan(root, "--format", "gitlab")
    issues = json.loads(out)
    severities = {i["check_name"]: i["severity"] for i in issues}
    assert severities == {"NPU101": "critical", "NPU103": "critical", "NPU908": "info"}, "by rule severity"
    assert len({i["fingerprint"] for i in issues}) == 3
    assert all(set(i) == {"description", "check_name", "fingerprint", "severity", "location"} for i in issues)
    _, out, _ = scan(root, "--format", "junit")
    suites = ET.fromstring(out)
    assert (suites.get("tests"), suites.get("failures")) == ("3", "2"), "the note passes"
    _, out, _ = scan(root, "--format", "junit", "--fail-on", "info")
    assert ET.fromstring(out).get("failures") == "3", "failures follow --fail-on"
    (root / "broken.py").write_text("import torch\ndef f(:\n    x.cuda()\n")
    out = run_cli("scan", "broken.py", "--format", "junit", cwd=root).stdout
    suites = ET.fromstring(out)  # a file that was not read is an error, not "tests=0"
    assert (suites.get("tests"), suites.get("errors")) == ("1", "1")
    error = suites.find("testsuite/testcase/error")
    assert error is not None and "cannot parse" in error.get("message", "")
    (root / "broken.py").unlink()
    _, out, _ = scan(root, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert list(rows[0]) == ["File", "Start Line", "End Line", "Operation Type", "Message"]
    assert [r["Operation Type"] for r in rows] == ["TO MODIFY", "TO MODIFY", "NOTE"]


def test_a_scans_csv_says_what_apply_would_do_with_each_finding(tmp_path: Path) -> None:
    """Operation types as the change list has them: a safe fix not yet made is TO MODIFY (an apply
    writes MODIFY for it), one only --unsafe makes a SUGGESTION, what needs a human UNSUPPORTED."""
    guard = "import torch\nif torch.cuda.is_available():\n    major = torch.cuda.get_device_capability()\n"
    files = {
        "cuda.py": CUDA_FILE,
        "graph.py": "import torch\ng = torch.cuda.CUDAGraph()\n",
        "guard.py": guard,
    }
    root = project(tmp_path, {**files, "note.py": NOTE_ONLY})
    _, out, _ = scan(root, "--format", "csv")
    rows = [
        (r["File"], r["Start Line"], r["Operation Type"], r["Message"])
        for r in csv.DictReader(io.StringIO(out))
    ]
    assert [row[:3] for row in rows] == [
        ("cuda.py", "3", "TO MODIFY"),
        ("cuda.py", "4", "TO MODIFY"),
        ("graph.py", "2", "SUGGESTION"),
        ("guard.py", "2", "UNSUPPORTED"),  # held back: it guards CUDA code left
        ("guard.py", "3", "UNSUPPORTED"),
        ("note.py", "3", "NOTE"),
    ]
    assert rows[0][3].endswith("→ torch.zeros(2).npu() (apply makes this edit)")
    assert rows[2][3].endswith("→ torch.npu.NPUGraph (unsafe fix: use --unsafe)")
    assert "(fix held back: it guards" in rows[3][3]
    run_cli("apply", ".", "--change-list", tmp_path / "c.csv", cwd=root)
    with (tmp_path / "c.csv").open(newline="") as handle:
        applied = [(r["File"], r["Operation Type"]) for r in csv.DictReader(handle) if r["File"] == "cuda.py"]
    assert applied == [("cuda.py", "INSERT"), ("cuda.py", "MODIFY"), ("cuda.py", "MODIFY")]


def test_several_formats_in_one_run_and_clear_errors(tmp_path: Path) -> None:
    root = project(tmp_path, {"cuda.py": CUDA_FILE})
    code, out, _ = scan(root, "--format", "text", "--format", "sarif:reports/npu.sarif")
    assert code == 1 and "cuda.py:3:5: NPU103 [safe]" in out
    assert json.loads((root / "reports" / "npu.sarif").read_text())["version"] == "2.1.0"
    code, out, _ = scan(root, "--format", "json", "--output-file", "npu.json")
    assert out == "" and len(json.loads((root / "npu.json").read_text())["findings"]) == 2
    bad = run_cli("scan", ".", "--format", "xml", cwd=root)
    assert bad.returncode == 2
    choices = "text, json, sarif, github, gitlab, junit, csv"
    assert bad.stderr.strip() == f"error: --format 'xml' is not one of {choices}"
    two = run_cli("scan", ".", "--format", "json", "--format", "csv", cwd=root)
    assert two.returncode == 2 and "only one format can go to the terminal" in two.stderr


def test_json_has_end_columns_and_fingerprints_that_survive_edits_above(tmp_path: Path) -> None:
    root = project(tmp_path, {"cuda.py": CUDA_FILE})
    _, out, _ = scan(root, "--format", "json")
    before = json.loads(out)["findings"]
    assert before[0]["end_column"] == 26 and before[0]["docs"].startswith("docs/rules.md#npu103-")
    (root / "cuda.py").write_text("# a comment above\n\n" + CUDA_FILE)
    _, out, _ = scan(root, "--format", "json")
    after = json.loads(out)["findings"]
    assert [f["line"] for f in after] == [f["line"] + 2 for f in before]
    assert [f["fingerprint"] for f in after] == [f["fingerprint"] for f in before]


def test_sarif_validates_against_the_published_schema(tmp_path: Path) -> None:
    """OASIS's SARIF 2.1.0 schema, as published in a SARIF tool's sources on PyPI."""
    import jsonschema

    from tests.sources import SARIF_SCHEMA, fetch

    schema = json.loads((fetch(SARIF_SCHEMA) / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
    unused = "x = 1  # npu-migrate: ignore[NPU103]\n"  # a result of the tool's own rule
    files = {
        "cuda.py": CUDA_FILE,
        "note.py": NOTE_ONLY,
        "broken.py": "x = torch.cuda.f(\n",
        "unused.py": unused,
    }
    root = project(tmp_path, files)
    code, out, _ = scan(root, "--format", "sarif")
    assert code == 1, "the file that cannot be parsed fails the gate"
    log = json.loads(out)
    jsonschema.validate(log, schema)
    notification = log["runs"][0]["invocations"][0]["toolExecutionNotifications"][0]
    assert notification["message"]["text"].startswith("broken.py: ")


def test_sarif_links_the_tool_and_each_rule_to_their_docs(tmp_path: Path) -> None:
    """Code scanning shows a rule's helpUri as its link: the rule's heading in docs/rules.md of
    the version installed (this checkout's, installed editable, as a file URI)."""
    root = project(tmp_path, {"cuda.py": CUDA_FILE})
    _, out, _ = scan(root, "--format", "sarif")
    driver = json.loads(out)["runs"][0]["tool"]["driver"]
    assert driver["informationUri"] == ROOT.as_uri()
    for rule in driver["rules"]:
        page, anchor = rule["helpUri"].split("#")
        assert page == (ROOT / "docs" / "rules.md").as_uri()
        heading = f"### {rule['id']} {rule['name']}"
        assert heading in (ROOT / "docs" / "rules.md").read_text() and anchor == heading[4:].lower().replace(
            " ", "-"
        )


def test_sarif_links_an_install_from_git_to_its_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip's record of `pip install "npu-migrate @ git+https://host/npu-migrate@REV"` (PEP 610)."""
    import importlib.metadata

    from npu_migrate.report.formats import sarif

    recorded = {"url": "https://host/npu-migrate.git", "vcs_info": {"vcs": "git", "commit_id": "ab12"}}

    class Installed:
        def read_text(self, name: str) -> str:
            return json.dumps(recorded) if name == "direct_url.json" else ""

    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Installed())
    assert sarif.installed_from() == sarif.Home(
        "https://host/npu-migrate", "https://host/npu-migrate/blob/ab12/docs"
    )
    recorded.pop("vcs_info")
    recorded["archive_info"] = {}  # a wheel file: no page with the docs
    assert sarif.installed_from() is None
