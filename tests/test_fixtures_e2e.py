"""End to end through the CLI on the bundled GPU projects: the migrated copy must equal the
reviewed expected tree byte for byte (other files and file modes included), a second run must
change nothing, and scan must report what scan.json records."""

from __future__ import annotations

import csv
import filecmp
import json
import os
import stat
from pathlib import Path

import pytest

from tests.fixture_cases import FIXTURES, NAMES, apply_into, run_cli, scan_json


def tree(root: Path) -> dict[str, tuple[bytes, bool]]:
    return {
        p.relative_to(root).as_posix(): (p.read_bytes(), bool(p.stat().st_mode & stat.S_IXUSR))
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("name", NAMES)
def test_apply_out_matches_the_expected_tree(name: str, tmp_path: Path) -> None:
    out = tmp_path / "migrated"
    result = apply_into(name, out)
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(f"exit {result.returncode}"), result.stderr
    assert tree(out) == tree(FIXTURES / name / "expected")


@pytest.mark.parametrize("name", NAMES)
def test_apply_is_idempotent(name: str, tmp_path: Path) -> None:
    out = tmp_path / "migrated"
    apply_into(name, out)
    before = tree(out)
    again = run_cli("apply", str(out), "--change-list", str(tmp_path / "again.csv"), cwd=tmp_path)
    assert "rewrote 0 file(s)" in again.stdout
    assert tree(out) == before


@pytest.mark.parametrize("name", NAMES)
def test_scan_reports_what_scan_json_records(name: str) -> None:
    assert scan_json(name) == json.loads((FIXTURES / name / "scan.json").read_text())


def test_files_without_findings_are_byte_identical_and_other_files_are_copied() -> None:
    src, expected = FIXTURES / "serve" / "src", FIXTURES / "serve" / "expected"
    for name in ("utils_cpu.py", "README.md", "config.yaml", "broken.py"):
        assert filecmp.cmp(src / name, expected / name, shallow=False), name


def test_expected_trees_keep_encoding_line_endings_and_modes() -> None:
    latin1 = (FIXTURES / "serve" / "expected" / "legacy_latin1.py").read_bytes()
    assert latin1.startswith(b"# -*- coding: latin-1 -*-") and b"h\xe9rit\xe9" in latin1
    assert b"x = x.npu()" in latin1
    crlf = (FIXTURES / "cnn_dp" / "expected" / "utils.py").read_bytes()
    assert b"th.npu.is_available()" in crlf and crlf.count(b"\r\n") == crlf.count(b"\n")
    assert os.access(FIXTURES / "gpt_ddp" / "expected" / "train.py", os.X_OK)


def test_strings_that_are_not_devices_stay(tmp_path: Path) -> None:
    train = (FIXTURES / "gpt_ddp" / "expected" / "train.py").read_text()
    assert 'help="device, e.g. cuda or cpu"' in train
    assert 'print(f"training on cuda with {n} GPUs")' in train
    assert '"this script requires the NCCL backend"' in train


def test_change_list_has_the_peer_columns(tmp_path: Path) -> None:
    out = tmp_path / "migrated"
    apply_into("gpt_ddp", out)
    with open(tmp_path / "gpt_ddp-changes.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["File", "Start Line", "End Line", "Operation Type", "Message"]
    kinds = {r["Operation Type"] for r in rows}
    assert kinds == {"INSERT", "MODIFY", "SUGGESTION", "NOTE", "UNSUPPORTED"}
    unsupported = [r for r in rows if r["Operation Type"] == "UNSUPPORTED"]
    # a human's only: torch.compile's Inductor needs triton-ascend on the NPU; no fix held back
    assert [r["Message"].split(":")[0] for r in unsupported] == ["`torch.compile`"]
    notes = {
        r["Rule"]
        for r in json.loads((tmp_path / "gpt_ddp-changes.json").read_text())
        if r["Operation Type"] == "NOTE"
    }
    assert "NPU908" in notes  # nn.GELU: worth knowing, nothing to do
    inserts = [r for r in rows if r["Operation Type"] == "INSERT"]
    assert {r["File"] for r in inserts} == {str(out / n) for n in ("train.py", "model.py", "data.py")}
    records = json.loads((tmp_path / "gpt_ddp-changes.json").read_text())
    assert len(records) == len(rows) and records[0]["File"] == rows[0]["File"]
