"""Report paths and fingerprints start at the repository's root, through the command line: the
same finding is named the same whether the scan runs from the root, a subfolder, with `..` or an
absolute path, so annotations land on the pull request's file and a baseline recorded one way
matches a scan run another."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.fixture_cases import run_cli
from tests.test_changes import git
from tests.test_cli import CUDA_FILE, project


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """A repository with a CUDA file at its root and one in a package, and a config folder."""
    root = project(
        tmp_path, {"bench.py": CUDA_FILE, "pkg/model.py": CUDA_FILE, "config/settings.yaml": "a: 1\n"}
    )
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-qm", "base")
    return root


def ways_to_name_it(root: Path) -> list[tuple[Path, str]]:
    """(working folder, path given to scan): the repository named four ways."""
    return [(root, "."), (root / "config", ".."), (root.parent, str(root)), (root.parent, root.name)]


def sarif_files(result: subprocess.CompletedProcess[str]) -> set[tuple[str, str]]:
    run = json.loads(result.stdout)["runs"][0]
    return {
        (
            r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            r["partialFingerprints"]["npuMigrate/v1"],
        )
        for r in run["results"]
    }


def test_every_format_names_files_from_the_repository_root(repository: Path) -> None:
    expected_github = {"bench.py", "pkg/model.py"}
    seen_sarif = []
    for cwd, named in ways_to_name_it(repository):
        github = run_cli("scan", named, "--format", "github", cwd=cwd).stdout
        files = {line.split("file=")[1].split(",")[0] for line in github.splitlines()}
        assert files == expected_github, (cwd, named, github)
        sarif = run_cli("scan", named, "--format", "sarif", cwd=cwd)
        seen_sarif.append(sarif_files(sarif))
        run = json.loads(sarif.stdout)["runs"][0]
        assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == repository.resolve().as_uri() + "/"
        location = run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
        assert location["uriBaseId"] == "%SRCROOT%"
        gitlab = json.loads(run_cli("scan", named, "--format", "gitlab", cwd=cwd).stdout)
        assert {i["location"]["path"] for i in gitlab} == expected_github
        junit = ET.fromstring(run_cli("scan", named, "--format", "junit", cwd=cwd).stdout)
        assert {suite.get("name") for suite in junit} == expected_github
    assert all(names == seen_sarif[0] for names in seen_sarif), "paths and fingerprints do not move"
    assert {uri for uri, _ in seen_sarif[0]} == expected_github


def test_the_text_report_names_files_as_the_user_did(repository: Path) -> None:
    """People read the terminal from where they stand, as ruff's text output does."""
    text = run_cli("scan", "..", cwd=repository / "config").stdout
    assert "../bench.py:3:5: NPU103" in text


def test_a_ci_systems_own_root_anchors_its_format(repository: Path) -> None:
    """GitLab anchors code quality paths to CI_PROJECT_DIR, GitHub's annotations are from
    GITHUB_WORKSPACE: where set, each format's paths start there."""
    checkout = str(repository / "pkg")  # a root that differs from git's, to see which one is used
    gitlab = run_cli("scan", ".", "--format", "gitlab", cwd=repository, env={"CI_PROJECT_DIR": checkout})
    assert {i["location"]["path"] for i in json.loads(gitlab.stdout)} == {
        "model.py",
        str(repository / "bench.py"),
    }
    github = run_cli("scan", ".", "--format", "github", cwd=repository, env={"GITHUB_WORKSPACE": checkout})
    assert "file=model.py," in github.stdout
    sarif = run_cli("scan", ".", "--format", "sarif", cwd=repository, env={"GITHUB_WORKSPACE": checkout})
    assert {uri for uri, _ in sarif_files(sarif)} == {"bench.py", "pkg/model.py"}, (
        "SARIF: the repository's root"
    )


def test_a_baseline_recorded_at_the_root_holds_however_the_scan_names_the_files(repository: Path) -> None:
    recorded = run_cli("scan", ".", "--baseline", "npu-baseline.json", "--update-baseline", cwd=repository)
    assert recorded.returncode == 0, recorded.stderr
    baseline = repository / "npu-baseline.json"
    assert {f["file"] for f in json.loads(baseline.read_text())["findings"]} == {"bench.py", "pkg/model.py"}
    for cwd, named in ways_to_name_it(repository):
        again = run_cli("scan", named, "--baseline", str(baseline), cwd=cwd)
        assert again.returncode == 0, (cwd, named, again.stdout, again.stderr)
        assert "4 finding(s) not reported: known to the baseline" in again.stderr
    (repository / "pkg" / "new.py").write_text("import torch\nx = torch.ones(1).cuda()\n")
    one_new = run_cli("scan", ".", "--baseline", str(baseline), "--format", "github", cwd=repository / "pkg")
    assert one_new.returncode == 1 and "file=pkg/new.py," in one_new.stdout


def test_outside_a_repository_paths_start_at_the_configuration(tmp_path: Path) -> None:
    root = project(tmp_path, {"pyproject.toml": "[tool.npu-migrate]\n", "src/train.py": CUDA_FILE})
    sarif = run_cli("scan", ".", "--format", "sarif", cwd=root / "src")
    assert {uri for uri, _ in sarif_files(sarif)} == {"src/train.py"}
