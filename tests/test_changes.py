"""Only what a change adds, through the command line: --diff-from a git revision, a baseline that
survives edits above its findings, and a changed-files list that names deleted files."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.fixture_cases import run_cli
from tests.test_cli import CUDA_FILE, project


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                   capture_output=True)  # fmt: skip


def found(result: subprocess.CompletedProcess[str]) -> list[tuple[str, int, str]]:
    return [(f["file"], f["line"], f["code"]) for f in json.loads(result.stdout)["findings"]]


def test_diff_from_reports_only_changed_lines_and_new_files(tmp_path: Path) -> None:
    root = project(tmp_path, {"old.py": CUDA_FILE})
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-qm", "legacy CUDA code")
    (root / "old.py").write_text(CUDA_FILE + "torch.cuda.empty_cache()\n")
    (root / "new.py").write_text("import torch\ntorch.cuda.manual_seed(0)\n")
    result = run_cli("scan", ".", "--diff-from", "HEAD", "--format", "json", cwd=root)
    assert result.returncode == 1
    assert found(result) == [("new.py", 2, "NPU101"), ("old.py", 5, "NPU101")]
    assert "2 finding(s) not reported: on lines unchanged since HEAD" in result.stderr
    git(root, "checkout", "-q", "--", "old.py")
    clean = run_cli("scan", "old.py", "--diff-from", "HEAD", cwd=root)
    assert clean.returncode == 0, clean.stderr
    # not "No CUDA-specific code found": there is some, on lines the diff does not touch
    assert (
        "No finding to report in 1 file(s) read: 2 finding(s) on lines unchanged since HEAD." in clean.stdout
    )
    bad = run_cli("scan", ".", "--diff-from", "no-such-rev", cwd=root)
    assert bad.returncode == 2 and bad.stderr.startswith(
        "error: --diff-from no-such-rev: no-such-rev is no commit"
    )
    assert len(bad.stderr.strip().splitlines()) == 1


def test_diff_from_charges_a_branch_with_what_it_adds_since_it_forked(tmp_path: Path) -> None:
    """main gains a CUDA call after the branch forked: the branch's gate, run on its own head as
    GitLab merge-request pipelines and developers run it, is charged only with its own call,
    whether it names `main` or `main...HEAD`; `main...feature` from main's side says the same."""
    root = project(tmp_path, {"a.py": "import torch\n"})
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "commit", "-qm", "base")
    git(root, "checkout", "-qb", "feature")
    (root / "b.py").write_text("import torch\ntorch.cuda.manual_seed(0)\n")
    git(root, "add", "b.py")
    git(root, "commit", "-qm", "the branch's CUDA call")
    git(root, "checkout", "-q", "main")
    (root / "a.py").write_text("import torch\ntorch.cuda.empty_cache()\n")
    git(root, "commit", "-qam", "main changes after the fork")
    git(root, "checkout", "-q", "feature")
    for rev in ("main", "main...HEAD", "main...feature"):
        result = run_cli("scan", ".", "--diff-from", rev, "--format", "json", cwd=root)
        assert result.returncode == 1, (rev, result.stderr)
        assert found(result) == [("b.py", 2, "NPU101")], rev
    git(root, "checkout", "-q", "main")
    from_main = run_cli("scan", ".", "--diff-from", "main...feature", "--format", "json", cwd=root)
    assert found(from_main) == [], (
        "feature's file is not checked out on main; main's own call is not the branch's"
    )
    bad = run_cli("scan", ".", "--diff-from", "main...nope", cwd=root)
    assert bad.returncode == 2 and "error: --diff-from main...nope: nope is no commit" in bad.stderr


def test_a_baseline_fails_only_on_new_findings_whatever_moved(tmp_path: Path) -> None:
    root = project(tmp_path, {"a.py": CUDA_FILE})
    recorded = run_cli("scan", ".", "--baseline", "npu-baseline.json", "--update-baseline", cwd=root)
    assert recorded.returncode == 0 and "recorded 2 finding(s) in the baseline" in recorded.stderr
    assert "2 finding(s) not reported: known to the baseline npu-baseline.json" in recorded.stderr
    same = run_cli("scan", ".", "--baseline", "npu-baseline.json", cwd=root)
    assert same.returncode == 0, same.stdout
    said = " ".join(same.stdout.split())
    assert (
        "No finding to report in 2 file(s) read: 2 finding(s) known to the baseline npu-baseline.json."
        in said
    )
    (root / "a.py").write_text("# a header\n\n" + CUDA_FILE + "torch.cuda.empty_cache()\n")
    moved = run_cli("scan", ".", "--baseline", "npu-baseline.json", "--format", "json", cwd=root)
    assert moved.returncode == 1
    assert found(moved) == [("a.py", 7, "NPU101")], "the two known findings moved down two lines"
    missing = run_cli("scan", ".", "--baseline", "nope.json", cwd=root)
    assert missing.returncode == 2
    assert missing.stderr.strip() == "error: no baseline nope.json: record one with --update-baseline"


def test_deleted_paths_in_a_changed_files_list_are_skipped_with_a_note(tmp_path: Path) -> None:
    root = project(tmp_path, {"a.py": CUDA_FILE})
    result = run_cli("scan", "a.py", "gone.py", cwd=root)
    assert result.returncode == 1 and "a.py:3:5: NPU103" in result.stdout
    assert "skipped gone.py: no such file or folder (deleted?)" in result.stderr
    only_deleted = run_cli("scan", "gone.py", "also-gone.py", cwd=root)
    assert only_deleted.returncode == 0, only_deleted.stderr
    typo = run_cli("scan", "gone.py", cwd=root)
    assert typo.returncode == 2 and typo.stderr.strip() == "error: no such file or folder: gone.py"
