"""The pre-commit hooks as pre-commit runs them: each hook's `entry` with the staged Python files
appended, in the repository's root."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from npu_migrate.discover import file_kind
from tests.fixture_cases import ROOT
from tests.test_cli import CUDA_FILE, project

HOOKS = {hook["id"]: hook for hook in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}


def run_hook(hook_id: str, root: Path, *files: str) -> subprocess.CompletedProcess[str]:
    hook = HOOKS[hook_id]
    assert hook["language"] == "python"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run([*hook["entry"].split(), *files], cwd=root, env=env, capture_output=True, text=True)


def test_the_scan_hook_stops_new_cuda_code(tmp_path: Path) -> None:
    root = project(tmp_path, {"clean.py": "import torch\nx = torch.zeros(2)\n", "cuda.py": CUDA_FILE})
    assert run_hook("npu-migrate-scan", root, "clean.py").returncode == 0
    stopped = run_hook("npu-migrate-scan", root, "clean.py", "cuda.py")
    assert stopped.returncode == 1 and "cuda.py:3:5: NPU103 [safe]" in stopped.stdout
    assert len(stopped.stdout.splitlines()) == 2, "--quiet: the findings, no summary table per batch"
    assert stopped.stderr.strip() == "exit 1: 2 finding(s) at or above --fail-on warning"
    passed = run_hook("npu-migrate-scan", root, "clean.py")
    assert (passed.stdout, passed.stderr) == ("", ""), "a batch that passes says nothing"


def test_the_apply_hook_rewrites_and_leaves_no_change_list(tmp_path: Path) -> None:
    root = project(tmp_path, {"cuda.py": CUDA_FILE})
    result = run_hook("npu-migrate-apply", root, "cuda.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "torch.zeros(2).npu()" in (root / "cuda.py").read_text()
    assert sorted(p.name for p in root.iterdir()) == ["cuda.py"], "no change list in the repository"


def test_the_hooks_take_every_kind_of_file_npu_migrate_reads() -> None:
    for hook in HOOKS.values():
        files, prose = re.compile(hook["files"]), re.compile(hook["exclude"])
        repo = ROOT / "fixtures" / "training_repo" / "src"
        for path in (p for p in repo.rglob("*") if p.is_file()):
            name = path.relative_to(repo).as_posix()
            first = path.read_bytes()[:200].split(b"\n", 1)[0]
            taken = bool(files.search(name)) and not prose.search(name)
            assert taken == (file_kind(name, first) is not None), name
        assert files.search("tools/launch") and prose.search("LICENSE"), "a script by its shebang, not prose"
