"""Hostile repositories through git: what git tracks is read whatever .gitignore says, and asking
git what changed never runs a program the repository's own config names."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from npu_migrate.discover import discover

from .test_cli import project as tree
from .test_hostile import CUDA, cli


def git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True, capture_output=True
    )


def repository(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tree(tmp_path, files)
    git(root, "init", "-q")
    git(root, "add", "-f", ".")
    git(root, "commit", "-q", "-m", "start")
    return root


def test_a_tracked_folder_that_gitignore_matches_is_read(tmp_path: Path) -> None:
    """`**/sat` over a project's tracked training path: git still tracks and ships those files."""
    root = repository(
        tmp_path,
        {
            ".gitignore": "**/sat\n*.log.py\n",
            "sat/train.py": CUDA,
            "sat/models/unet.py": CUDA,
            "model.py": CUDA,
        },
    )
    (root / "sat" / "scratch.py").write_text(CUDA)  # untracked and ignored: skipped, counted
    (root / "run.log.py").write_text(CUDA)
    (root / "build" / "lib").mkdir(parents=True)
    (root / ".gitignore").write_text("**/sat\n*.log.py\nbuild/\n")
    read = sorted(f.display for f in discover([root]) if not f.skipped)
    assert [Path(d).relative_to(root).as_posix() for d in read] == [
        "model.py",
        "sat/models/unet.py",
        "sat/train.py",
    ]
    scan = cli("scan", root / "sat", "--format", "json", cwd=tmp_path)
    report = json.loads(scan.stdout)
    assert report["summary"]["files"] == 2 and scan.returncode == 1
    assert report["summary"]["ignored_by_gitignore"] == {"files": 1, "folders": 0}
    text = cli("scan", root, cwd=tmp_path)
    assert "skipped 2 file(s) and 1 folder(s) matched by .gitignore and not tracked by git" in text.stdout


def test_a_folder_gitignore_hides_whole_is_nothing_read_not_a_pass(tmp_path: Path) -> None:
    root = repository(tmp_path, {".gitignore": "out/\n", "model.py": "x = 1\n"})
    (root / "out").mkdir()
    (root / "out" / "gen.py").write_text(CUDA)
    scan = cli("scan", root / "out", cwd=tmp_path)
    assert scan.returncode == 2 and "nothing was read" in scan.stderr


def test_diff_from_runs_nothing_the_repository_configures(tmp_path: Path) -> None:
    """A repository's .git/config may name programs git runs to diff: a textconv driver, a clean
    filter, an fsmonitor hook. Asking what changed must run none of them."""
    root = repository(
        tmp_path, {"model.py": "import torch\n", ".gitattributes": "*.py diff=conv filter=clean\n"}
    )
    marker = tmp_path / "ran"
    program = tmp_path / "evil.sh"
    program.write_text(f"#!/bin/sh\necho $0 >> {marker}\ncat\n")
    program.chmod(0o755)
    for key in ("diff.conv.textconv", "filter.clean.clean", "filter.clean.smudge", "core.fsmonitor"):
        git(root, "config", key, str(program))
    (root / "model.py").write_text("import torch\nx.cuda()\n")
    scan = cli("scan", root, "--diff-from", "HEAD", "--format", "json", cwd=tmp_path)
    assert scan.returncode == 1, scan.stderr
    assert [f["line"] for f in json.loads(scan.stdout)["findings"]] == [2]
    assert not marker.exists(), marker.read_text()
