"""The CI gate attacked: `--diff-from` must charge a change with every CUDA line it adds, whatever
the file is called, however git is configured to print diffs, and inside a notebook's cells; and
the result cache must never hand one file's result to another file of another kind."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from .test_hostile import CUDA, cli
from .test_hostile_git import git, repository

ADDED = "import torch\nx = 1\ny.cuda()\n"


def gated(root: Path, tmp_path: Path) -> list[tuple[str, int]]:
    scan = cli("scan", root, "--diff-from", "HEAD", "--format", "json", cwd=tmp_path)
    assert scan.returncode in (0, 1), scan.stderr
    return [(Path(f["file"]).name, f["line"]) for f in json.loads(scan.stdout)["findings"]]


@pytest.mark.parametrize("name", ["my model.py", "modèle.py", 'quote"d.py', "tab\tname.py", "+++ b.py"])
def test_a_cuda_line_added_to_a_file_git_quotes_fails_the_gate(tmp_path: Path, name: str) -> None:
    """git quotes a path with non-ASCII or special characters as a C string and ends one with a
    space with a tab: the gate read neither, and passed the new `.cuda()`."""
    root = repository(tmp_path, {name: "import torch\nx = 1\n"})
    (root / name).write_text(ADDED)
    assert gated(root, tmp_path) == [(name.replace("\t", "\\t"), 3)]  # (a tab is shown as \\t)


@pytest.mark.parametrize(
    "setting", ["diff.mnemonicPrefix=true", "diff.noprefix=true", "diff.srcPrefix=x/", "diff.dstPrefix=y/"]
)
def test_the_repository_s_diff_prefixes_do_not_hide_a_change(tmp_path: Path, setting: str) -> None:
    """A repository (or the user's git config) that prints diffs without the a/ b/ prefixes, or
    with i/ w/ ones, made every changed file unknown to the gate."""
    root = repository(tmp_path, {"model.py": "import torch\nx = 1\n"})
    key, value = setting.split("=")
    git(root, "config", key, value)
    (root / "model.py").write_text(ADDED)
    assert gated(root, tmp_path) == [("model.py", 3)]


def test_an_added_line_that_reads_like_a_file_header_is_a_line(tmp_path: Path) -> None:
    """`++ b/other.py` added to a file shows in the diff as `+++ b/other.py`: a line, not a file."""
    root = repository(tmp_path, {"model.py": "import torch\ns = '''\n'''\n", "other.py": CUDA})
    (root / "model.py").write_text("import torch\ns = '''\n++ b/other.py\n'''\ny.cuda()\n")
    assert gated(root, tmp_path) == [("model.py", 5)]


def notebook(*cells: str) -> str:
    code = [{"cell_type": "code", "metadata": {}, "source": c.splitlines(True), "outputs": []} for c in cells]
    return json.dumps({"cells": code, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1)


def test_a_cuda_line_added_to_a_notebook_cell_fails_the_gate(tmp_path: Path) -> None:
    """A finding in a notebook is placed by cell and line; the diff's lines are the JSON's. The
    gate compared one with the other and passed a `.cuda()` added to a cell."""
    root = repository(tmp_path, {"train.ipynb": notebook("import torch\n", "x.cuda()\n")})
    (root / "train.ipynb").write_text(notebook("import torch\n", "x.cuda()\n", "w = 2\ny.cuda()\n"))
    assert gated(root, tmp_path) == [("train.ipynb", 2)]  # cell 3's line 2, not cell 2's old line 1
    scan = cli("scan", root, "--diff-from", "HEAD", "--format", "json", cwd=tmp_path)
    assert [f["cell"] for f in json.loads(scan.stdout)["findings"]] == [3]


def test_an_untouched_notebook_cell_moved_down_is_not_charged(tmp_path: Path) -> None:
    root = repository(tmp_path, {"train.ipynb": notebook("import torch\n", "x.cuda()\n")})
    (root / "train.ipynb").write_text(notebook("import torch\n", "# a new cell\n", "x.cuda()\n"))
    assert gated(root, tmp_path) == []


def test_files_of_two_kinds_with_the_same_bytes_keep_their_own_results(tmp_path: Path) -> None:
    """The result cache keyed a file by its bytes alone: `nvidia-smi` read as Python (a
    subtraction: nothing to find), then a shell script with the same bytes found that cached
    empty result, and the gate passed it."""
    (tmp_path / "check.py").write_text("nvidia-smi\n")
    (tmp_path / "check.sh").write_text("nvidia-smi\n")
    first = cli("scan", tmp_path / "check.py", "--format", "json", cwd=tmp_path)
    second = cli("scan", tmp_path / "check.sh", "--format", "json", cwd=tmp_path)
    uncached = cli("scan", tmp_path / "check.sh", "--format", "json", "--no-cache", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert second.returncode == uncached.returncode == 1
    assert json.loads(second.stdout)["findings"] == json.loads(uncached.stdout)["findings"] != []


def test_a_cache_entry_rewritten_with_its_checksum_cannot_make_apply_write_broken_code(
    tmp_path: Path,
) -> None:
    """An entry's checksum catches a torn write, not an entry rewritten with a matching one:
    apply wrote the entry's text, which did not parse, and exited 0."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(CUDA)
    assert cli("apply", source, "--out", tmp_path / "first", cwd=tmp_path).returncode == 0
    tampered = 0
    for entry in (tmp_path / ".cache").rglob("v1/*/*"):
        value = entry.read_bytes()[32:]
        value = json.loads(value) if value.startswith(b"{") else None
        if isinstance(value, dict) and value.get("new_source"):
            value["new_source"] = "def broken(:\n"
            data = json.dumps(value).encode()
            entry.write_bytes(hashlib.sha256(data).digest() + data)
            tampered += 1
    assert tampered == 1
    again = cli("apply", source, "--out", tmp_path / "second", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "second" / "train.py").read_bytes() == (tmp_path / "first" / "train.py").read_bytes()
