"""Suppression comments through the command line: what they silence is neither reported nor
fixed, strings are not comments, stale ones are reported, and --add-ignore adopts a legacy
repository in one run without touching anything else."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

from tests.fixture_cases import FIXTURES, run_cli
from tests.test_cli import project

CODE = (
    "import torch\n\n"
    "x = torch.zeros(2).cuda()  # npu-migrate: ignore[NPU103]\n"
    "torch.cuda.synchronize()  # npu-migrate: ignore\n"
    "y = torch.ones(2).cuda()  # npu-migrate: ignore[NPU101]\n"
    's = "# npu-migrate: ignore"; z = torch.ones(3).cuda()\n'
)


def scan_json(root: Path) -> dict:
    return json.loads(run_cli("scan", ".", "--format", "json", cwd=root).stdout)


def test_suppressed_findings_are_neither_reported_nor_fixed(tmp_path: Path) -> None:
    root = project(tmp_path, {"a.py": CODE})
    data = scan_json(root)
    assert [(f["line"], f["code"]) for f in data["findings"]] == [(5, "NPU103"), (6, "NPU103")]
    assert data["summary"]["suppressed"] == 2
    assert data["summary"]["unused_suppressions"] == [{"file": "a.py", "line": 5}]
    text = run_cli("scan", ".", cwd=root)
    assert "unused suppression a.py:5: this suppression comment suppresses nothing; remove it" in text.stdout
    applied = run_cli("apply", "a.py", "--change-list", tmp_path / "c.csv", cwd=root)
    assert applied.returncode == 0, applied.stdout
    lines = (root / "a.py").read_text().splitlines()
    assert lines[3:5] == CODE.splitlines()[2:4], "suppressed lines stay as they were"
    assert lines[5] == "y = torch.ones(2).npu()  # npu-migrate: ignore[NPU101]"


NOQA = (
    "import torch\n\n"
    "x = torch.zeros(2).cuda()  # noqa: NPU103\n"
    "torch.cuda.synchronize()  # noqa: E501, npu101\n"
    "y = torch.ones(2).cuda()  # noqa\n"
    "z = torch.ones(3).cuda()  # noqa: E501\n"
    "import os  # noqa: F401, NPU105\n"
)


def test_noqa_naming_our_codes_suppresses_them_and_nothing_else(tmp_path: Path) -> None:
    """flake8's and ruff's habit: `# noqa: NPU103` suppresses NPU103 there; a bare `# noqa` and a
    noqa naming only other linters' codes are theirs, suppress nothing of ours and are not
    reported as unused (a noqa of ours that suppresses nothing is)."""
    root = project(tmp_path, {"a.py": NOQA})
    data = scan_json(root)
    assert [(f["line"], f["code"]) for f in data["findings"]] == [(5, "NPU103"), (6, "NPU103")]
    assert data["summary"]["suppressed"] == 2
    assert data["summary"]["unused_suppressions"] == [{"file": "a.py", "line": 7}]
    applied = run_cli("apply", "a.py", "--change-list", tmp_path / "c.csv", cwd=root)
    assert applied.returncode == 0, applied.stdout
    migrated = (root / "a.py").read_text().splitlines()
    assert set(NOQA.splitlines()[2:4]) <= set(migrated), "suppressed lines stay as they were"
    assert "y = torch.ones(2).npu()  # noqa" in migrated


def test_unused_suppressions_reach_every_ci_format(tmp_path: Path) -> None:
    root = project(tmp_path, {"a.py": CODE})
    github = run_cli("scan", ".", "--format", "github", cwd=root).stdout.splitlines()
    assert "::notice file=a.py,line=5,title=unused-suppression::this suppression" in "\n".join(github)
    sarif = json.loads(run_cli("scan", ".", "--format", "sarif", cwd=root).stdout)["runs"][0]
    unused = [r for r in sarif["results"] if r["ruleId"] == "unused-suppression"]
    assert len(unused) == 1 and unused[0]["level"] == "note"
    assert unused[0]["locations"][0]["physicalLocation"]["region"] == {"startLine": 5}
    assert sarif["tool"]["driver"]["rules"][unused[0]["ruleIndex"]]["id"] == "unused-suppression"
    gitlab = json.loads(run_cli("scan", ".", "--format", "gitlab", cwd=root).stdout)
    unused = [i for i in gitlab if i["check_name"] == "unused-suppression"]
    assert [(i["severity"], i["location"]["lines"]["begin"]) for i in unused] == [("info", 5)]


def test_a_file_level_suppression_covers_the_file(tmp_path: Path) -> None:
    code = "# npu-migrate: ignore-file[NPU103]\nimport torch\n\nx = torch.zeros(2).cuda()\n"
    code += "torch.cuda.synchronize()\n"
    root = project(tmp_path, {"a.py": code})
    assert [f["code"] for f in scan_json(root)["findings"]] == ["NPU101"]


def test_add_ignore_adopts_a_legacy_repository(tmp_path: Path) -> None:
    legacy = tmp_path / "legacy"
    shutil.copytree(FIXTURES / "cnn_dp" / "src", legacy)
    first = run_cli("scan", ".", "--add-ignore", cwd=legacy)
    assert first.returncode == 0, first.stderr
    assert "added suppressions on 26 line(s) in 2 file(s)" in first.stderr
    again = run_cli("scan", ".", cwd=legacy)
    assert again.returncode == 0 and "28 finding(s) suppressed" in again.stdout
    assert run_cli("scan", ".", "--add-ignore", cwd=legacy).stderr.count("on 0 line(s)") == 1
    for path in legacy.glob("*.py"):
        original = (FIXTURES / "cnn_dp" / "src" / path.name).read_text().splitlines()
        now = path.read_text().splitlines()
        ast.parse(path.read_text())
        assert len(now) == len(original)
        for new, old in zip(now, original, strict=True):
            assert new == old or new.startswith(old.rstrip() + "  # npu-migrate: ignore["), "a comment only"


def test_a_comment_goes_where_one_can_stand(tmp_path: Path) -> None:
    code = "import torch\n\nx = torch.zeros(2) \\\n    .cuda()\n"
    code += "msg = '''\ntext'''; torch.cuda.synchronize()\n"
    root = project(tmp_path, {"a.py": code})
    result = run_cli("scan", ".", "--add-ignore", cwd=root)
    assert result.returncode == 0, result.stderr
    written = (root / "a.py").read_text()
    ast.parse(written)
    assert "    .cuda()  # npu-migrate: ignore[NPU103]\n" in written, "not after the backslash"
    assert "text'''; torch.cuda.synchronize()  # npu-migrate: ignore[NPU101]\n" in written


def test_text_that_spells_a_suppression_suppresses_nothing(tmp_path: Path) -> None:
    """A heredoc's body, a quoted `echo` argument, a quoted YAML value: text the program reads, not
    comments; and an `ignore[` never closed is no suppression (it would act as a bare `ignore`)."""
    files = {
        "heredoc.sh": "cat > notes <<EOF\n# npu-migrate: ignore-file\nEOF\nexport CUDA_VISIBLE_DEVICES=0\n",
        "echo.sh": 'echo "# npu-migrate: ignore-file"\nexport CUDA_VISIBLE_DEVICES=0\n',
        "config.yaml": 'note: "see # npu-migrate: ignore-file"\ndevice: cuda\n',
        "open.py": "import torch\nx = torch.zeros(2).cuda()  # npu-migrate: ignore[NPU101\n",
        "comment.sh": "# npu-migrate: ignore-file[NPU751]\nexport CUDA_VISIBLE_DEVICES=0\n",
        "quoted.yaml": "device: cuda  # npu-migrate: ignore\n",
    }
    root = project(tmp_path, files)
    data = scan_json(root)
    found = sorted({Path(f["file"]).name for f in data["findings"]})
    assert found == ["config.yaml", "echo.sh", "heredoc.sh", "open.py"], data["findings"]
    assert data["summary"]["suppressed"] == 2
