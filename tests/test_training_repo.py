"""A repository that mixes every kind of file npu-migrate reads (fixtures/training_repo): one
coherent report, grouped by kind of file; apply rewrites each kind where its rules say and leaves
every other byte, and every file without a finding, as it was; a scan of the migrated tree is the
to-do list that remains; the change list covers every rewritten file."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
from pathlib import Path

import tomllib
import yaml

from tests.fixture_cases import FIXTURES, run_cli

REPO = FIXTURES / "training_repo" / "src"
UNCHANGED = ("requirements-dev.txt", "configs/tokenizer.json", "scripts/clean.sh", "csrc/fused.cpp")


def findings_of(root: Path, *options: str) -> list[dict]:
    result = run_cli("scan", root.name, "--format", "json", *options, cwd=root.parent)
    assert "Traceback" not in result.stderr
    return json.loads(result.stdout)["findings"]


def test_one_report_covers_every_kind_of_file() -> None:
    report = json.loads(run_cli("scan", "src", "--format", "json", cwd=REPO.parent).stdout)
    kinds = report["summary"]["by_file_kind"]
    assert set(kinds) == {
        "python", "notebook", "shell", "dockerfile", "makefile", "requirements", "pyproject",
        "setup.py", "setup.cfg", "conda", "config", "native",
    }  # fmt: skip
    assert report["summary"]["files"] == 19 and report["summary"]["files_with_findings"] == 16
    located = {(f["file"].removeprefix("src/"), f["line"], f["code"]) for f in report["findings"]}
    assert {
        ("Dockerfile", 1, "NPU831"),  # FROM nvidia/cuda
        ("Dockerfile", 7, "NPU767"),  # RUN pip install flash-attn
        ("Makefile", 6, "NPU751"),  # $(CUDA_VISIBLE_DEVICES) in a recipe
        ("requirements.txt", 3, "NPU761"),  # torch without torch_npu
        ("environment.yml", 8, "NPU764"),  # pytorch-cuda from conda
        ("setup.py", 7, "NPU769"),  # triton in install_requires
        ("configs/ds_config.json", 5, "NPU771"),  # comm_backend_name: nccl
        ("csrc/fused.cpp", 8, "NPU841"),  # m.def("fused_gelu", ...)
        ("csrc/fused_kernel.cu", 4, "NPU842"),  # __global__ gelu_kernel
        ("fastops/__init__.py", 9, "NPU841"),  # _C.fused_gelu(x)
    } <= located


def test_operators_are_linked_to_their_build_and_their_callers() -> None:
    report = findings_of(REPO)
    registered = next(f for f in report if f["file"].endswith("fused.cpp") and f["original"] == "fused_gelu")
    assert registered["message"].endswith(
        "built as `fastops._C`; called from src/fastops/__init__.py:9, src/notebooks/explore.ipynb:cell 3:5"
    )
    call = next(f for f in report if f["file"].endswith("explore.ipynb") and f["code"] == "NPU841")
    assert (call["cell"], call["line"], call["column"]) == (3, 5, 5)
    assert call["message"].endswith("registered in src/csrc/fused.cpp:8")


def test_apply_rewrites_each_kind_and_leaves_every_other_byte(tmp_path: Path) -> None:
    out = tmp_path / "migrated"
    result = run_cli(
        "apply",
        "src",
        "--out",
        str(out),
        "--unsafe",
        "--change-list",
        str(tmp_path / "c.csv"),
        cwd=REPO.parent,
    )
    assert result.returncode == 1, result.stdout + result.stderr  # the manual findings remain
    for name in UNCHANGED:
        assert (out / name).read_bytes() == (REPO / name).read_bytes(), name
    assert (out / "requirements.txt").read_text() == (
        "# the CUDA 12.1 stack\n"
        "--extra-index-url https://download.pytorch.org/whl/cpu\n"
        "torch_npu==2.1.0.*\n"
        "torch==2.1.0  # pinned for the cluster\n"
        'flash_attn>=2.5.0 ; platform_system == "Linux"\n'
        "numpy>=1.24\n"
        "nvidia-ml-py\n"
    )
    makefile = (out / "Makefile").read_text()
    assert "export ASCEND_RT_VISIBLE_DEVICES ?= 0,1" in makefile
    assert '\t@echo "cards: $(ASCEND_RT_VISIBLE_DEVICES)"' in makefile, "set and read: renamed together"
    assert (out / "Dockerfile").read_text().splitlines()[1] == "ENV ASCEND_RT_VISIBLE_DEVICES=0,1 \\"
    assert '"comm_backend_name": "hccl"' in (out / "configs/ds_config.json").read_text()
    assert "distributed_type: MULTI_NPU  # two cards" in (out / "configs/accelerate.yaml").read_text()
    assert subprocess.run(["bash", "-n", out / "scripts/launch.sh"], check=False).returncode == 0
    with (tmp_path / "c.csv").open() as handle:
        changed = {row["File"] for row in csv.DictReader(handle) if row["Operation Type"] == "MODIFY"}
    rewritten = {
        p.relative_to(out).as_posix()
        for p in out.rglob("*")
        if p.is_file() and p.read_bytes() != (REPO / p.relative_to(out)).read_bytes()
    }
    assert {Path(name).relative_to(out).as_posix() for name in changed} == rewritten


def test_a_scan_of_the_migrated_tree_is_what_is_left_to_do(tmp_path: Path) -> None:
    out = tmp_path / "src"
    shutil.copytree(REPO, out)
    run_cli("apply", str(out), "--unsafe", "--no-change-list", cwd=tmp_path)
    left = findings_of(out)
    assert left and all(f["label"] in ("manual", "held", "note") for f in left), "nothing automatic is left"
    assert not [f for f in left if f["code"] == "NPU761" and f["file"].endswith("requirements.txt")]
    assert {f["code"] for f in left} >= {"NPU841", "NPU767", "NPU831", "NPU764", "NPU774"}


def test_add_ignore_comments_only_where_a_comment_can_stand(tmp_path: Path) -> None:
    """A notebook, JSON, a Dockerfile, C++ and setup.cfg take no end-of-line comment: they are
    named and left as they are; every other suppression is honoured by the next scan."""
    root = tmp_path / "src"
    shutil.copytree(REPO, root)
    added = run_cli("scan", "src", "--add-ignore", cwd=tmp_path)
    unplaced = [line for line in added.stderr.splitlines() if line.startswith("not suppressed")]
    for name in (
        "notebooks/explore.ipynb",
        "configs/ds_config.json",
        "Dockerfile",
        "csrc/fused.cpp",
        "setup.cfg",
    ):
        assert (root / name).read_bytes() == (REPO / name).read_bytes(), name
        assert any(line.startswith(f"not suppressed src/{name}:") for line in unplaced), name
    json.loads((root / "notebooks/explore.ipynb").read_text())
    tomllib.loads((root / "pyproject.toml").read_text())
    yaml.safe_load((root / "configs/train.yaml").read_text())
    assert subprocess.run(["bash", "-n", root / "scripts/launch.sh"], check=False).returncode == 0
    assert "\t@echo" in (root / "Makefile").read_text() and "?= 0,1\n" in (root / "Makefile").read_text()
    left = [f for f in findings_of(root) if f["label"] not in ("note",)]
    assert len(left) == len(unplaced)
