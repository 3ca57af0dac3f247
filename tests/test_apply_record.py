"""apply's previews and its record, through the command line: --diff, --dry-run and --check write
nothing and say different things; the change list lands outside the repository being migrated,
and a later run keeps what an earlier one recorded."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

from tests.fixture_cases import run_cli
from tests.test_cli import CUDA_FILE, project

MANUAL = "major = torch.cuda.get_device_capability()\n"  # NPU106: a human must act
GRAPH = "g = torch.cuda.CUDAGraph()\n"  # NPU601: an unsafe fix


def last_line(stderr: str) -> str:
    return stderr.strip().splitlines()[-1]


def everything(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_diff_prints_what_apply_would_change_and_writes_nothing(tmp_path: Path) -> None:
    root = project(tmp_path, {"a.py": CUDA_FILE})
    before = everything(tmp_path)
    diff = run_cli("apply", root, "--diff", cwd=tmp_path)
    assert diff.stdout.startswith(f"--- a{root}/a.py\n+++ b{root}/a.py\n")
    assert "\n-x = torch.zeros(2).cuda()  # move\n" in diff.stdout
    assert "\n+x = torch.zeros(2).npu()  # move\n" in diff.stdout
    assert "would rewrite 1 file(s), 2 change(s)" in diff.stderr, "the summary goes to stderr"
    assert everything(tmp_path) == before, "no source, no change list"
    assert diff.returncode == 1 and last_line(diff.stderr) == "exit 1: apply would change 1 file(s) (--diff)"
    assert run_cli("apply", root, "--diff", "--exit-zero", cwd=tmp_path).returncode == 0
    out = run_cli("apply", root, "--diff", "--out", tmp_path / "copy", cwd=tmp_path)
    assert out.returncode == 1 and not (tmp_path / "copy").exists(), "no copy either"

    dry = run_cli("apply", root, "--dry-run", cwd=tmp_path)  # the summary alone, exit as apply's
    assert dry.returncode == 0, dry.stderr
    assert "would rewrite 1 file(s), 2 change(s)" in dry.stdout and "+++" not in dry.stdout
    check = run_cli("apply", root, "--check", cwd=tmp_path)
    assert check.returncode == 1 and "+++" not in check.stdout
    assert everything(tmp_path) == before

    assert run_cli("apply", root, cwd=tmp_path).returncode == 0
    done = run_cli("apply", root, "--diff", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, ""), done.stderr
    (root / "b.py").write_text("import torch\n" + MANUAL)
    left = run_cli("apply", root, "--diff", cwd=tmp_path)
    assert left.returncode == 1 and left.stdout == "", "nothing to change, but work is left"
    assert last_line(left.stderr) == "exit 1: 1 finding(s) at or above --fail-on warning"
    assert run_cli("apply", root, "--check", cwd=tmp_path).returncode == 0, "--check asks only what changes"


def test_the_default_change_list_lands_outside_the_repository_being_migrated(tmp_path: Path) -> None:
    repo = project(tmp_path, {"src/a.py": CUDA_FILE, "README.md": "# a model\n"})
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    copy = run_cli("apply", "src", "--out", tmp_path / "copy", cwd=repo)
    assert copy.returncode == 0, copy.stderr
    beside_copy = tmp_path / "copy-npu-migrate-changes.csv"
    assert f"change list: {beside_copy} and {beside_copy.with_suffix('.json')}" in copy.stdout
    with beside_copy.open(newline="") as handle:
        assert {row["File"] for row in csv.DictReader(handle)} == {str(tmp_path / "copy" / "a.py")}
    assert sorted(p.name for p in repo.iterdir()) == [".git", "README.md", "src"]
    assert sorted(p.name for p in (tmp_path / "copy").iterdir()) == ["a.py"]
    in_place = run_cli("apply", ".", cwd=repo / "src")  # from a folder of the repository
    assert in_place.returncode == 0, in_place.stderr
    beside = tmp_path / "proj-npu-migrate-changes.csv"
    assert beside.is_file() and sorted(p.name for p in repo.iterdir()) == [".git", "README.md", "src"]
    elsewhere = tmp_path / "reports"
    elsewhere.mkdir()
    other = project(tmp_path / "other", {"a.py": CUDA_FILE})
    run_cli("apply", other, cwd=elsewhere)  # run from a folder of no tree it migrates: beside the tree
    assert (tmp_path / "other" / "proj-npu-migrate-changes.csv").is_file()
    assert list(elsewhere.iterdir()) == []


def test_a_later_run_keeps_the_record_of_an_earlier_one(tmp_path: Path) -> None:
    root = project(tmp_path, {"a.py": CUDA_FILE + GRAPH})
    changes, twin = tmp_path / "proj-npu-migrate-changes.csv", tmp_path / "proj-npu-migrate-changes.json"

    def rows() -> list[tuple[int, str, int, str, str]]:
        return [
            (r["Run"], r["File"].removeprefix(f"{root}/"), r["Start Line"], r["Operation Type"], r["Rule"])
            for r in json.loads(twin.read_text())
            if "Rule" in r
        ]

    first = run_cli("apply", root, cwd=tmp_path)
    assert first.returncode == 1, first.stderr  # the unsafe fix is left
    migrated = [(1, "a.py", 4, "MODIFY", "NPU103"), (1, "a.py", 5, "MODIFY", "NPU101")]
    assert rows() == [*migrated, (1, "a.py", 6, "SUGGESTION", "NPU601")]
    assert "(unsafe fix: use --unsafe)" in changes.read_text()
    recorded = changes.read_bytes(), twin.read_bytes()

    again = run_cli("apply", root, cwd=tmp_path)  # nothing left to change
    assert "rewrote 0 file(s)" in again.stdout
    assert f"change list: {changes} kept as an earlier run wrote it (nothing rewritten)" in again.stdout
    assert (changes.read_bytes(), twin.read_bytes()) == recorded

    unsafe = run_cli("apply", root, "--unsafe", cwd=tmp_path)  # the next step of the migration
    assert unsafe.returncode == 0, unsafe.stderr
    assert "4 row(s), 3 of them kept from earlier runs" in unsafe.stdout
    assert rows() == [*migrated, (2, "a.py", 6, "MODIFY", "NPU601")], "the first run's edits stay"

    (root / "b.py").write_text(CUDA_FILE)
    more = run_cli("apply", root, cwd=tmp_path)
    assert more.returncode == 0, more.stderr
    assert [row for row in rows() if row[1] == "a.py"] == [*migrated, (2, "a.py", 6, "MODIFY", "NPU601")]
    assert [row[:4] for row in rows() if row[1] == "b.py"] == [
        (3, "b.py", 4, "MODIFY"),
        (3, "b.py", 5, "MODIFY"),
    ]
    with changes.open(newline="") as handle:
        table = list(csv.DictReader(handle))
    assert list(table[0]) == ["File", "Start Line", "End Line", "Operation Type", "Message"]
    assert len(table) == len(json.loads(twin.read_text())) == 7, "two INSERTs beside the five edits"

    changes.write_text("name,score\nann,3\n")  # not a change list: left as it is, and said
    twin.unlink()
    (root / "c.py").write_text(CUDA_FILE)
    refused = run_cli("apply", root, cwd=tmp_path)
    assert refused.returncode == 2
    assert f"error: cannot write the change list {changes}: a file that is no change list" in refused.stderr
    assert changes.read_text() == "name,score\nann,3\n" and (root / "c.py").read_text() == CUDA_FILE
