"""The CI recipes of docs/ci.md, run as the page shows them: the GitHub Actions workflow's and
the GitLab job's commands in a clone whose branch forked before main changed, with the variables
those systems set; pre-commit itself, installing this repository at the commit the recipe pins.
Only the install lines are left out: the tool under test is the one installed here; the commit
they pin is checked to be one of this repository's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.fixture_cases import ROOT, outside_ci
from tests.test_changes import git

LEGACY = "import torch\n\nx = torch.zeros(2).cuda()\n"  # main's debt: a finding before the branch
ADDED_ON_MAIN = "import torch\n\nx = torch.zeros(2).cuda()\ny = torch.ones(2).cuda()\n"
NEW_CUDA = "import torch\n\nz = torch.randn(3).cuda()\n"
SUGGESTION_ONLY = "import torch\n\n\ndef make(model):\n    return torch.optim.AdamW(model.parameters())\n"


RECIPES = ROOT / "docs" / "ci.md"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def readme_yaml(key: str) -> dict:
    """The recipe page's YAML block that has `key` at its top level."""
    blocks = re.findall(r"```yaml\n(.*?)```", RECIPES.read_text(encoding="utf-8"), re.DOTALL)
    found = [data for data in map(yaml.safe_load, blocks) if isinstance(data, dict) and key in data]
    assert len(found) == 1, f"one recipe with {key!r} in {RECIPES.name}"
    return found[0]


def is_a_commit_here(rev: str) -> bool:
    """`rev` names a commit of this repository (a fresh clone has it)."""
    found = subprocess.run(["git", "cat-file", "-e", f"{rev}^{{commit}}"], cwd=ROOT, capture_output=True)
    return found.returncode == 0


def clone_with_a_forked_branch(tmp_path: Path, *added: tuple[str, str]) -> Path:
    """origin has main with legacy CUDA code; a branch forks, then main changes a line; the
    clone is on the branch, which adds `added` (name, text) in a commit."""
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "legacy.py").write_text(LEGACY)
    git(seed, "init", "-q", "-b", "main")
    git(seed, "add", ".")
    git(seed, "commit", "-qm", "base")
    git(seed, "branch", "feature")
    (seed / "legacy.py").write_text(ADDED_ON_MAIN)
    git(seed, "commit", "-qam", "main moves on")
    origin = tmp_path / "origin.git"
    git(tmp_path, "clone", "-q", "--bare", str(seed), str(origin))
    clone = tmp_path / "checkout"
    git(tmp_path, "clone", "-q", "-b", "feature", str(origin), str(clone))
    for name, text in added:
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        (clone / name).write_text(text)
    git(clone, "add", ".")
    git(clone, "commit", "-qm", "the change under review")
    return clone


def shell(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A recipe's command as the CI runner runs it, with this interpreter's tools on PATH."""
    tools = Path(sys.executable).parent
    full = {**outside_ci(), "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}", "COLUMNS": "200", **env}
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=full, capture_output=True, text=True)


def installs(command: str) -> bool:
    return command.startswith("pip install")


# -- GitHub Actions ------------------------------------------------------------------------------


def github_steps(event: str, base_ref: str) -> list[tuple[str, str]]:
    """(name, command) of the workflow's `run` steps that run on `event`, with `${{ github.* }}`
    put in; a condition this test cannot read fails it, so the README cannot drift."""
    workflow = readme_yaml("jobs")
    on = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads `on` as true
    assert set(on) == {"push", "pull_request"}, "code scanning needs the default branch's analysis"
    (job,) = workflow["jobs"].values()
    assert job["permissions"] == {"contents": "read", "security-events": "write", "actions": "read"}
    context = {"event_name": event, "base_ref": base_ref}
    steps = []
    for step in job["steps"]:
        condition = step.get("if")
        if condition is not None:
            match = re.fullmatch(r"github\.(\w+) == '([^']*)'", condition)
            assert match, f"a condition the test cannot read: {condition}"
            if context[match[1]] != match[2]:
                continue
        if "uses" in step:
            if step["uses"].startswith("actions/checkout"):
                assert step["with"]["fetch-depth"] == 0, "--diff-from needs the merge base"
            continue
        command = re.sub(r"\$\{\{\s*github\.(\w+)\s*\}\}", lambda m: context[m[1]], step["run"])
        if not installs(command):
            steps.append((step.get("name", command), command))
    return steps


def uploaded_sarif(workflow_dir: Path) -> dict:
    (job,) = readme_yaml("jobs")["jobs"].values()
    upload = next(
        s for s in job["steps"] if s.get("uses", "").startswith("github/codeql-action/upload-sarif")
    )
    return json.loads((workflow_dir / upload["with"]["sarif_file"]).read_text())


def test_the_github_actions_recipe_gates_what_a_pull_request_adds(tmp_path: Path) -> None:
    clone = clone_with_a_forked_branch(tmp_path, ("new.py", NEW_CUDA), ("optim.py", SUGGESTION_ONLY))
    env = {"GITHUB_WORKSPACE": str(clone), "GITHUB_EVENT_NAME": "pull_request"}
    (full, sarif_step), (gate, gate_step) = github_steps("pull_request", "main")
    scanned = shell(sarif_step, clone, env)
    assert scanned.returncode == 0, f"{full}: {scanned.stderr}"
    results = uploaded_sarif(clone)["runs"][0]["results"]
    located = {
        (r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"], r["ruleId"]) for r in results
    }
    assert located == {("legacy.py", "NPU103"), ("new.py", "NPU103"), ("optim.py", "NPU910")}, (
        "a full analysis"
    )
    gated = shell(gate_step, clone, env)
    assert gated.returncode == 1, f"{gate}: {gated.stdout} {gated.stderr}"
    annotations = gated.stdout.splitlines()
    assert [line.split(",")[0] for line in annotations] == ["::error file=new.py", "::notice file=optim.py"]
    assert "legacy.py" not in gated.stdout, "the branch is not charged with main's later change"


def test_the_github_actions_recipe_passes_suggestions_and_scans_all_on_push(tmp_path: Path) -> None:
    clone = clone_with_a_forked_branch(tmp_path, ("optim.py", SUGGESTION_ONLY))
    env = {"GITHUB_WORKSPACE": str(clone)}
    for _, command in github_steps("pull_request", "main"):
        assert shell(command, clone, env).returncode == 0, "an optimisation suggestion is no CUDA-only code"
    on_push = github_steps("push", "")
    assert len(on_push) == 1, "on the default branch: the analysis, no gate"
    assert shell(on_push[0][1], clone, env).returncode == 0
    assert {r["ruleId"] for r in uploaded_sarif(clone)["runs"][0]["results"]} == {"NPU103", "NPU910"}


# -- GitLab CI -----------------------------------------------------------------------------------


def test_the_gitlab_recipe_reports_everything_and_gates_what_a_merge_request_adds(tmp_path: Path) -> None:
    recipe = readme_yaml("npu-migrate")["npu-migrate"]
    assert recipe["variables"]["GIT_DEPTH"] == 0, "--diff-from needs the merge base"
    clone = clone_with_a_forked_branch(tmp_path, ("pkg/new.py", NEW_CUDA))
    env = {
        "CI_PROJECT_DIR": str(clone),
        "CI_PIPELINE_SOURCE": "merge_request_event",
        "CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "main",
        "CI_DEFAULT_BRANCH": "main",
        "CI_COMMIT_BRANCH": "",
    }
    outcomes = [shell(command, clone, env) for command in recipe["script"] if not installs(command)]
    assert [done.returncode for done in outcomes] == [0, 1], [done.stderr for done in outcomes]
    quality = json.loads((clone / recipe["artifacts"]["reports"]["codequality"]).read_text())
    found = {(issue["location"]["path"], issue["check_name"], issue["severity"]) for issue in quality}
    assert found == {("legacy.py", "NPU103", "critical"), ("pkg/new.py", "NPU103", "critical")}, (
        "a full report"
    )
    gate = outcomes[1]
    assert "pkg/new.py:3:5: NPU103" in gate.stdout and "legacy.py" not in gate.stdout
    assert gate.stderr.strip().splitlines()[-1] == "exit 1: 1 finding(s) at or above --fail-on warning"


# -- pre-commit ----------------------------------------------------------------------------------


def pinned_revs() -> list[str]:
    """Every commit a recipe pins, in README.md and docs/: pip's `npu-migrate @ git+URL@REV` and
    pre-commit's `rev:`."""
    text = "\n".join(page.read_text(encoding="utf-8") for page in PAGES)
    return re.findall(r"npu-migrate@([^\s\"']+)\"", text) + re.findall(r"^\s*rev: (\S+)", text, re.M)


def test_every_recipe_pins_a_commit_of_this_repository() -> None:
    revs = pinned_revs()
    assert len(revs) >= 4, "the README's pip line, the two CI jobs' and pre-commit's rev"
    assert [rev for rev in revs if not is_a_commit_here(rev)] == [], "pin a commit this repository has"


def test_the_pre_commit_recipe_runs_under_pre_commit(tmp_path: Path) -> None:
    """pre-commit installs this repository at the commit the recipe pins, as it does from a
    clone's remote: `repo:` is this checkout, `rev:` as written."""
    config = readme_yaml("repos")
    (repo,) = config["repos"]
    assert is_a_commit_here(repo["rev"]), f"{repo['rev']} is no commit of this repository"
    repo["repo"] = str(ROOT)
    project = tmp_path / "project"
    project.mkdir()
    (project / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    (project / "optim.py").write_text(SUGGESTION_ONLY)
    (project / "new.py").write_text(NEW_CUDA)
    git(project, "init", "-q")
    git(project, "add", ".")
    env = {"PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home")}
    pre_commit = f"{sys.executable} -m pre_commit run --files"
    passed = shell(f"{pre_commit} optim.py .pre-commit-config.yaml", project, env)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    stopped = shell(f"{pre_commit} new.py optim.py", project, env)
    assert stopped.returncode == 1, stopped.stdout + stopped.stderr
    assert "new.py:3:5: NPU103 [safe]" in stopped.stdout
    assert "CUDA touchpoints" not in stopped.stdout, "--quiet: no summary table per batch"
