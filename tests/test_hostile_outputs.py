"""Where reports, baselines and change lists go: a path that is not a regular file is written
into as a shell redirect would, a link is written through, and no output ever replaces a source."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from .test_cli import project as tree
from .test_hostile import CUDA, cli, no_traceback


def read_fifo(path: Path, into: list[bytes]) -> threading.Thread:
    def read() -> None:
        with path.open("rb") as fifo:
            into.append(fifo.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader


def test_a_report_into_a_fifo_keeps_the_fifo(tmp_path: Path) -> None:
    root = tree(tmp_path, {"train.py": CUDA})
    fifo = tmp_path / "report.pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = read_fifo(fifo, got)
    run = cli("scan", root, "--format", f"json:{fifo}", cwd=tmp_path)
    reader.join(10)
    no_traceback(run)
    assert fifo.is_fifo()
    assert json.loads(got[0])["summary"]["findings"] == 2


def test_a_report_through_a_link_writes_the_file_it_names(tmp_path: Path) -> None:
    root = tree(tmp_path, {"train.py": CUDA})
    (tmp_path / "reports").mkdir()
    link = tmp_path / "latest.sarif"
    link.symlink_to(tmp_path / "reports" / "run.sarif")
    run = cli("scan", root, "--format", f"sarif:{link}", cwd=tmp_path)
    no_traceback(run)
    assert link.is_symlink()
    assert json.loads((tmp_path / "reports" / "run.sarif").read_text())["version"] == "2.1.0"


def test_a_baseline_never_replaces_a_file_that_is_not_one(tmp_path: Path) -> None:
    root = tree(tmp_path, {"src/train.py": CUDA, "notes.json": '{"a": 1}\n'})
    for target in (root / "src" / "train.py", root / "notes.json"):
        before = target.read_bytes()
        run = cli("scan", root, "--baseline", target, "--update-baseline", cwd=tmp_path)
        no_traceback(run)
        assert run.returncode == 2 and target.read_bytes() == before
    assert "is one of the files being read" in run.stderr or "not an npu-migrate baseline" in run.stderr
    outside = tmp_path / "todo.txt"
    outside.write_text("my notes\n")
    run = cli("scan", root, "--baseline", outside, "--update-baseline", cwd=tmp_path)
    assert (
        run.returncode == 2
        and "todo.txt exists and is not an npu-migrate baseline; not replaced" in run.stderr
    )
    assert outside.read_text() == "my notes\n"
    baseline = tmp_path / "baseline.json"
    assert cli("scan", root, "--baseline", baseline, "--update-baseline", cwd=tmp_path).returncode == 0
    assert cli("scan", root, "--baseline", baseline, "--update-baseline", cwd=tmp_path).returncode == 0


def test_no_report_or_change_list_replaces_a_source(tmp_path: Path) -> None:
    root = tree(tmp_path, {"train.py": CUDA, "config.json": '{"device": "cuda"}\n'})
    run = cli("scan", root, "--format", f"json:{root / 'train.py'}", cwd=tmp_path)
    assert run.returncode == 2 and "is one of the files being read" in run.stderr
    run = cli("apply", root, "--change-list", root / "config", cwd=tmp_path)
    assert run.returncode == 2 and "config.json is one of the files being read" in run.stderr
    assert (root / "train.py").read_text() == CUDA  # refused before any source was touched
    assert (root / "config.json").read_text() == '{"device": "cuda"}\n'
