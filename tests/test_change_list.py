"""The change list, through the command line: it goes beside the tree apply migrated, whatever
folder apply runs from; it never mixes two trees' rows; and apply never writes over what a user
keeps at its path: a list they edited, a folder, a file that is no change list, a source."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.test_apply_record import GRAPH
from tests.test_cli import CUDA_FILE, project
from tests.test_hostile import cli, no_traceback

NAME = "npu-migrate-changes"


def refused(run: subprocess.CompletedProcess[str], *says: str) -> None:
    """A one-line error, exit 2, that says each of `says`."""
    no_traceback(run)
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.startswith("error: ") and run.stderr.count("\n") == 1, run.stderr
    for words in says:
        assert words in run.stderr, run.stderr


def files_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_the_change_list_goes_beside_the_copy_whatever_folder_apply_runs_from(tmp_path: Path) -> None:
    project(tmp_path, {"a.py": CUDA_FILE})
    sub = tmp_path / "sub"
    sub.mkdir()
    run = cli("apply", "../proj", "--out", "../out", cwd=sub)
    assert run.returncode == 0, run.stderr
    beside = tmp_path / f"out-{NAME}.csv"
    assert f"change list: {beside} and {beside.with_suffix('.json')}" in run.stdout
    assert files_in(sub) == [".cache"], "nothing but the result cache in the folder apply ran from"
    assert files_in(tmp_path / "out") == ["a.py"]


def test_an_in_place_change_list_goes_beside_the_tree_not_into_the_current_folder(tmp_path: Path) -> None:
    root = project(tmp_path, {"a.py": CUDA_FILE, "lib/b.py": CUDA_FILE})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert cli("apply", root, cwd=elsewhere).returncode == 0
    assert (tmp_path / f"proj-{NAME}.csv").is_file() and files_in(elsewhere) == [".cache"]
    (root / "lib" / "c.py").write_text(CUDA_FILE)
    one_file = cli("apply", root / "lib" / "c.py", cwd=elsewhere)  # a file: beside its folder
    assert one_file.returncode == 0, one_file.stderr
    assert (root / f"lib-{NAME}.csv").is_file() and files_in(elsewhere) == [".cache"]


def test_two_trees_migrated_from_one_folder_get_a_change_list_each(tmp_path: Path) -> None:
    """Wan2.1's apply run where Megatron's ran no longer reports Megatron's rows as its own."""
    megatron = project(tmp_path / "megatron", {"a.py": CUDA_FILE})
    wan = project(tmp_path / "wan", {"b.py": CUDA_FILE, "c.py": CUDA_FILE})
    work = tmp_path / "work"
    work.mkdir()
    assert cli("apply", megatron, "--out", "megatron_npu", cwd=work).returncode == 0
    second = cli("apply", wan, "--out", "wan_npu", cwd=work)
    assert second.returncode == 0, second.stderr
    assert "kept from earlier runs" not in second.stdout
    for copy, files in (("megatron_npu", {"a.py"}), ("wan_npu", {"b.py", "c.py"})):
        with (work / f"{copy}-{NAME}.csv").open(newline="") as handle:
            assert {Path(row["File"]).name for row in csv.DictReader(handle)} == files


def test_two_trees_never_share_a_change_list(tmp_path: Path) -> None:
    """Megatron's rows are no part of Wan2.1's record: a second tree's apply into the list of a
    first one is refused before it writes anything, and the first one's list stays as it was."""
    megatron = project(tmp_path / "megatron", {"a.py": CUDA_FILE})
    wan = project(tmp_path / "wan", {"b.py": CUDA_FILE})
    shared = tmp_path / "changes.csv"
    first = cli("apply", megatron, "--out", tmp_path / "m", "--change-list", shared, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    recorded = shared.read_bytes(), shared.with_suffix(".json").read_bytes()
    second = cli("apply", wan, "--out", tmp_path / "w", "--change-list", shared, cwd=tmp_path)
    refused(second, f"the change list of {megatron} -> {tmp_path / 'm'}", "name another with --change-list")
    assert (shared.read_bytes(), shared.with_suffix(".json").read_bytes()) == recorded
    assert not (tmp_path / "w").exists(), "refused before any work"
    in_place = cli("apply", wan, "--change-list", shared, cwd=tmp_path)
    refused(in_place, "the change list of")
    assert (wan / "b.py").read_text() == CUDA_FILE
    shutil.rmtree(tmp_path / "m")  # the same copy made again from another tree: not the same tree
    again = cli("apply", wan, "--out", tmp_path / "m", "--change-list", shared, cwd=tmp_path)
    refused(again, "the change list of")


EDITS: dict[str, Callable[[list[list[str]]], list[list[str]]]] = {
    "a reviewer's column": lambda t: [t[0] + ["Reviewed"], *([*row, "ok"] for row in t[1:])],
    "a note in a message": lambda t: [t[0], [*t[1][:4], t[1][4] + " (checked by Ann)"], *t[2:]],
    "a deleted row": lambda t: t[:-1],
    "reordered rows": lambda t: [t[0], *reversed(t[1:])],
}


@pytest.mark.parametrize("edit", EDITS)
def test_a_change_list_a_user_edited_is_never_overwritten(tmp_path: Path, edit: str) -> None:
    root = project(tmp_path, {"a.py": CUDA_FILE + GRAPH})
    changes = tmp_path / "changes.csv"
    assert cli("apply", root, "--change-list", changes, cwd=tmp_path).returncode == 1
    with changes.open(newline="") as handle:
        table = list(csv.reader(handle))
    with changes.open("w", newline="") as handle:
        csv.writer(handle, lineterminator="\n").writerows(EDITS[edit](table))
    reviewed = changes.read_bytes()
    run = cli("apply", root, "--unsafe", "--change-list", changes, cwd=tmp_path)
    refused(run, f"{changes}: edited since npu-migrate wrote it", "move it aside")
    assert changes.read_bytes() == reviewed
    assert (root / "a.py").read_text().endswith(GRAPH), "no source touched"


def test_a_change_list_without_its_twin_is_never_overwritten(tmp_path: Path) -> None:
    root = project(tmp_path, {"a.py": CUDA_FILE + GRAPH})
    changes = tmp_path / "changes.csv"
    assert cli("apply", root, "--change-list", changes, cwd=tmp_path).returncode == 1
    recorded = changes.read_bytes()
    changes.with_suffix(".json").unlink()
    refused(
        cli("apply", root, "--unsafe", "--change-list", changes, cwd=tmp_path),
        "edited since npu-migrate wrote it",
    )
    assert changes.read_bytes() == recorded
    assert not changes.with_suffix(".json").exists()


def test_a_change_list_path_that_is_no_change_list_is_refused_and_left_alone(tmp_path: Path) -> None:
    """A folder, a missing folder, a file of the user's (a spreadsheet, a binary, a huge file, a
    link to a file elsewhere, the JSON twin's place taken): each refused before any work."""
    root = project(tmp_path, {"a.py": CUDA_FILE})
    (tmp_path / "folder.csv").mkdir()
    for folder in (tmp_path / "folder.csv", ".", "/", ""):  # the last three raised ValueError
        refused(cli("apply", root, "--change-list", folder, cwd=tmp_path), "a folder")
    (tmp_path / "twin.json").mkdir()
    refused(cli("apply", root, "--change-list", tmp_path / "twin.csv", cwd=tmp_path), "a folder is there")
    missing = tmp_path / "no-such" / "c.csv"
    refused(cli("apply", root, "--change-list", missing, cwd=tmp_path), "its folder does not exist")
    assert not missing.parent.exists()
    notes = tmp_path / "notes.txt"
    notes.write_text("name,score\nann,3\n")
    (tmp_path / "link.csv").symlink_to(notes)
    (tmp_path / "binary.csv").write_bytes(bytes(range(256)) * 4)
    with (tmp_path / "huge.csv").open("wb") as handle:
        handle.truncate(8 << 30)  # 8 GiB of holes: never read whole
    (tmp_path / "scores.csv").write_text("name,score\nann,3\n")
    for name in ("link.csv", "binary.csv", "huge.csv", "scores.csv"):
        before = (tmp_path / name).lstat(), (tmp_path / name).stat()
        run = cli("apply", root, "--change-list", tmp_path / name, cwd=tmp_path)
        refused(run, f"{tmp_path / name}: a file that is no change list")
        after = (tmp_path / name).lstat(), (tmp_path / name).stat()
        assert [(s.st_ino, s.st_mtime_ns, s.st_size) for s in after] == [
            (s.st_ino, s.st_mtime_ns, s.st_size) for s in before
        ], name
    assert notes.read_text() == "name,score\nann,3\n" and (tmp_path / "link.csv").is_symlink()
    (tmp_path / "report.json").write_text('{"mine": true}\n')
    run = cli("apply", root, "--change-list", tmp_path / "report.csv", cwd=tmp_path)
    refused(run, f"{tmp_path / 'report.json'}: a file that is no change list")
    assert (tmp_path / "report.json").read_text() == '{"mine": true}\n'
    assert not (tmp_path / "report.csv").exists()
    assert (root / "a.py").read_text() == CUDA_FILE, "no source touched"


def test_a_change_list_named_after_a_source_file_is_refused(tmp_path: Path) -> None:
    root = project(tmp_path, {"a.py": CUDA_FILE, "b.py": CUDA_FILE})
    run = cli("apply", root / "a.py", "--change-list", root / "b.py", cwd=tmp_path)
    refused(run, f"{root / 'b.py'}: a file that is no change list")
    assert files_in(root) == ["a.py", "b.py"], "no b.csv nor b.json written into the tree"
    for source, says in (
        ("a.py", "is one of the files being read"),
        ("b.py", "a file that is no change list"),
    ):
        link = tmp_path / f"{source}.csv"  # b.py, which this run does not read, was written through it
        link.symlink_to(root / source)
        refused(cli("apply", root / "a.py", "--change-list", link, cwd=tmp_path), says)
    assert (root / "a.py").read_text() == (root / "b.py").read_text() == CUDA_FILE


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file of mode 000")
def test_an_unreadable_change_list_is_refused_and_left_alone(tmp_path: Path) -> None:
    root = project(tmp_path, {"a.py": CUDA_FILE + GRAPH})
    changes = tmp_path / "changes.csv"
    assert cli("apply", root, "--change-list", changes, cwd=tmp_path).returncode == 1
    recorded = changes.read_bytes()
    changes.chmod(0)
    try:
        refused(cli("apply", root, "--unsafe", "--change-list", changes, cwd=tmp_path), f"{changes}: ")
    finally:
        changes.chmod(0o644)
    assert changes.read_bytes() == recorded
