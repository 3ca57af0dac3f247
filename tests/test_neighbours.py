"""A tool that behaves like its neighbours: --version, completion, help that names every command
and types only what takes a value, rules as JSON, apply --check, a file from stdin, and plain
errors for a folder given as a script or a file given as --out."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from tests.fixture_cases import run_cli
from tests.test_cli import CUDA_FILE, project


def test_version_help_and_completion(tmp_path: Path) -> None:
    version = run_cli("--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("npu-migrate 0.")
    top = run_cli("--help", cwd=tmp_path).stdout
    assert all(command in top for command in ("scan", "apply", "run", "verify", "rules"))
    assert "<bool>" not in run_cli("scan", "--help", cwd=tmp_path).stdout
    # typer finds the shell among the command's parents: run it from bash (`; true` keeps bash
    # from exec-ing it), whatever runs the tests
    command = f"{shlex.quote(sys.executable)} -m npu_migrate --show-completion; true"
    completion = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=False)
    assert "complete" in completion.stdout, completion.stderr


def test_rules_list_as_json(tmp_path: Path) -> None:
    rules = json.loads(run_cli("rules", "list", "--format", "json", cwd=tmp_path).stdout)
    first = next(r for r in rules if r["code"] == "NPU101")
    assert first["applicability"] == "safe" and first["severity"] == "error" and first["summary"]
    assert run_cli("rules", "list", "--format", "xml", cwd=tmp_path).returncode == 2


def test_apply_check_writes_nothing_and_says_whether_it_would(tmp_path: Path) -> None:
    root = project(tmp_path, {"a.py": CUDA_FILE})
    would = run_cli("apply", ".", "--check", cwd=root)
    assert would.returncode == 1 and (root / "a.py").read_text() == CUDA_FILE
    assert would.stderr.strip().endswith("exit 1: apply would change 1 file(s) (--check)")
    assert sorted(p.name for p in root.iterdir()) == ["a.py"], "no change list either"
    run_cli("apply", ".", "--no-change-list", cwd=root)
    assert run_cli("apply", ".", "--check", cwd=root).returncode == 0


def test_scan_reads_one_file_from_stdin(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "npu_migrate", "scan", "-", "--stdin-filename", "src/model.py"]
    result = subprocess.run(
        [*command, "--format", "github"], input=CUDA_FILE, capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stdout.splitlines()[0].startswith("::error file=src/model.py,line=3,col=5,")


def test_plain_errors_for_a_folder_script_and_a_file_out(tmp_path: Path) -> None:
    root = project(tmp_path, {"a.py": CUDA_FILE})
    folder = run_cli("run", ".", cwd=root)
    assert folder.returncode == 2
    assert folder.stderr.strip() == "error: . is a folder; give the script to run"
    (tmp_path / "out.txt").write_text("x")
    out = run_cli("apply", root, "--out", tmp_path / "out.txt", cwd=tmp_path)
    assert out.returncode == 2 and "is a file; name a folder for the migrated copy" in out.stderr


def test_a_piped_run_says_how_far_it_is(tmp_path: Path, cli, monkeypatch) -> None:
    """A CI log gets a line every PROGRESS_SECONDS (here: every file) instead of silence."""
    from npu_migrate.cli import common

    monkeypatch.setattr(common, "PROGRESS_SECONDS", 0.0)
    root = project(tmp_path, {f"m{i:02}.py": CUDA_FILE for i in range(25)})
    result = cli("scan", root, "--no-cache")
    lines = [line for line in result.stderr.splitlines() if line.startswith("scanning: ")]
    assert lines[0].startswith("scanning: 1/25 file(s), ") and lines[-1].startswith("scanning: 24/25 file(s)")


def test_the_change_list_stays_out_of_the_migrated_repository(tmp_path: Path) -> None:
    root = project(tmp_path, {"a.py": CUDA_FILE})
    inside = run_cli("apply", ".", cwd=root)
    assert inside.returncode == 0, inside.stderr
    assert sorted(p.name for p in root.iterdir()) == ["a.py"]
    assert (tmp_path / "proj-npu-migrate-changes.csv").is_file()
    (root / "b.py").write_text(CUDA_FILE)
    again = run_cli("apply", ".", cwd=root)
    assert "6 row(s), 3 of them kept from earlier runs" in again.stdout, "merged, not replaced"
