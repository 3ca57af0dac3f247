"""Hostile input to the non-Python handlers: one file a parser chokes on is reported for that
file ("not read: why") and the run goes on; nothing takes time out of proportion to its size."""

from __future__ import annotations

import contextlib
import json
import os
import resource
from pathlib import Path

from .test_cli import project as tree
from .test_hostile import CUDA, MIGRATED, cli, no_traceback


def report(run_args: tuple, cwd: Path) -> tuple[int, dict]:
    run = cli("scan", *run_args, "--format", "json", "--no-cache", cwd=cwd)
    no_traceback(run)
    return run.returncode, json.loads(run.stdout)


def test_a_vendored_pyproject_that_does_not_parse_stops_nothing(tmp_path: Path) -> None:
    """A vendored package's invalid or duplicate-key pyproject.toml is that file's problem: it is
    not ours (it names no [tool.npu-migrate]), so it configures nothing, and the rest is read."""
    root = tree(
        tmp_path,
        {
            "train.py": CUDA,
            "third_party/a/pyproject.toml": "[project\nname = 'a'\n",
            "third_party/a/x.py": CUDA,
            "third_party/b/pyproject.toml": "[project]\nname = 'b'\nname = 'c'\n",
            "third_party/b/y.py": CUDA,
        },
    )
    code, data = report((root,), tmp_path)
    assert code == 1
    assert (
        sorted(Path(f["file"]).name for f in data["findings"])
        == ["train.py"] * 2 + ["x.py"] * 2 + ["y.py"] * 2
    )
    assert sorted(Path(u["file"]).parent.name for u in data["summary"]["not_read"]) == ["a", "b"]
    applied = cli("apply", root, "--no-change-list", cwd=tmp_path)
    assert applied.returncode == 1 and (root / "third_party" / "a" / "x.py").read_text() == MIGRATED


def test_our_own_table_in_a_broken_pyproject_is_still_an_error(tmp_path: Path) -> None:
    root = tree(tmp_path, {"pyproject.toml": "[tool.npu-migrate]\nselect = [\n", "train.py": CUDA})
    run = cli("scan", root, cwd=tmp_path)
    assert run.returncode == 2 and "cannot read" in run.stderr and "pyproject.toml" in run.stderr


def test_a_deep_toml_array_is_read_or_not_read_and_the_run_goes_on(tmp_path: Path) -> None:
    """5,000 levels: TOML's parser reads it (a list where strings go holds no requirement);
    200,000: it cannot, and says so for that file."""
    for depth, unread in ((5000, []), (200000, ["nested too deeply to parse"])):
        deep = "[project]\nname = 'x'\ndependencies = " + "[" * depth + "]" * depth + "\n"
        root = tree(tmp_path / str(depth), {"pyproject.toml": deep, "train.py": CUDA})
        code, data = report((root,), tmp_path)
        assert code == 1 and len(data["findings"]) == 2 and not data["summary"]["errors"]
        assert [u["reason"] for u in data["summary"]["not_read"]] == unread


def test_values_of_the_wrong_type_in_a_pyproject_hold_nothing_to_read(tmp_path: Path) -> None:
    odd = "[project]\nname = 'x'\ndependencies = 5\noptional-dependencies = [1]\n[tool]\npoetry = 'no'\n"
    root = tree(tmp_path, {"pyproject.toml": odd, "requirements.txt": "torch==2.1.0\n"})
    code, data = report((root,), tmp_path)
    assert code == 1, "the requirements file still needs its torch_npu pin"
    assert not data["summary"]["errors"] and not data["summary"]["not_read"]


def test_a_yaml_alias_tree_takes_the_time_its_size_does(tmp_path: Path) -> None:
    """A few hundred bytes of aliases (each level names the one before ten times) describe 10**9
    paths; each node is visited once, where its anchor is written."""
    lines = ["a0: &a0 {device: cuda, gpu_ids: [0, 1]}"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    root = tree(tmp_path, {"config.yaml": "\n".join(lines) + "\n", "train.py": CUDA})
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    code, data = report((root,), tmp_path)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime) < 20  # CPU-seconds
    assert code == 1 and not data["summary"]["errors"]
    assert {Path(f["file"]).name for f in data["findings"]} >= {"train.py"}


def test_deep_json_and_yaml_are_not_read_and_the_run_goes_on(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "deep.json": '{"device": "cuda", "x": ' + "[" * 100000 + "]" * 100000 + "}\n",
            "deep.yaml": "device: cuda\nx: " + "[" * 100000 + "]" * 100000 + "\n",
            "train.py": CUDA,
        },
    )
    code, data = report((root,), tmp_path)
    assert code == 1 and not data["summary"]["errors"]
    assert len([f for f in data["findings"] if f["file"].endswith("train.py")]) == 2


def test_malformed_notebooks_and_python_python_refuses_are_not_read_not_internal_errors(
    tmp_path: Path,
) -> None:
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None}
    notebooks = {
        "ints.ipynb": {"cells": [{**cell, "source": ["import torch\n", 7]}], "metadata": {}, "nbformat": 4},
        "cells.ipynb": {"cells": 3, "nbformat": 4},
        "list.ipynb": [1, 2],
        "cell.ipynb": {"cells": ["x.cuda()"], "nbformat": 4},
    }
    files = {name: json.dumps(value) for name, value in notebooks.items()}
    files["deep.ipynb"] = '{"cells": ' + "[" * 100000 + "]" * 100000 + "}"
    files["bogus.py"] = 'import torch\nx = "\\N{BOGUS}"\ny.cuda()\n'  # libcst reads it, Python does not
    root = tree(tmp_path, {**files, "train.py": CUDA})
    code, data = report((root,), tmp_path)
    assert code == 1 and not data["summary"]["errors"]
    unread = {Path(u["file"]).name: u["reason"] for u in data["summary"]["not_read"]}
    assert sorted(unread) == sorted(files)
    assert unread["bogus.py"].startswith("line 2: cannot parse: (unicode error)")
    assert unread["deep.ipynb"] == "not a notebook: nested too deeply to parse"
    assert unread["ints.ipynb"] == "not a notebook: cell 1: its source is neither text nor a list of lines"


def _deeper_than_path_max(top: Path) -> None:
    """Folders whose full path is longer than PATH_MAX (4096), made relative to each other."""
    fd = os.open(top, os.O_RDONLY)
    try:
        for _ in range(60):
            os.mkdir("x" * 80, dir_fd=fd)
            inner = os.open("x" * 80, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        with os.fdopen(os.open("deep.py", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as out:
            out.write(CUDA)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


def test_a_folder_deeper_than_path_max_is_reported_and_the_run_goes_on(tmp_path: Path) -> None:
    root = tree(tmp_path, {"train.py": CUDA})
    (root / "deep").mkdir()
    _deeper_than_path_max(root / "deep")
    code, data = report((root,), tmp_path)
    assert code == 1 and len(data["findings"]) == 2
    assert [s["reason"] for s in data["summary"]["skipped"]] == ["cannot read: File name too long"]
    copy = cli("apply", root, "--out", tmp_path / "copy", "--no-change-list", cwd=tmp_path)
    no_traceback(copy)
    assert copy.returncode == 2 and f"cannot copy {root / 'deep'}" in copy.stderr.replace("\n", "")
    assert ".partial" not in copy.stderr and not (tmp_path / "copy").exists()
    assert (root / "train.py").read_text() == CUDA
