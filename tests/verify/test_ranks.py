"""`verify --nproc 2`: each side under torchrun with two ranks, the entry initialising the process
group and wrapping its model as the trainer does (DDP, FSDP, FSDP2's fully_shard on a device mesh
that starts the group itself), compared rank by rank; a planted
communication hook that sums the ranks' gradients where DDP averages them fails at the rank and
the parameter (fixtures/verify/ddp, fixtures/verify/fsdp)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from npu_migrate.verify.ranks import unwrapped
from tests.fixture_cases import MARKER, left_running, run_cli
from tests.verify.test_verify import CASES, pair, verify

pytest.importorskip("torch")


@pytest.mark.parametrize(
    ("model", "modules"),
    [("ddp", {"0", "3"}), ("fsdp", {"blocks.0", "blocks.1.up", "head"}), ("fsdp2", {"1", "1.norm", "3"})],
)
def test_a_correct_distributed_migration_passes_on_every_rank(
    model: str, modules: set[str], tmp_path: Path
) -> None:
    code, data, output = verify(tmp_path, *pair(model, "migrated"), "--nproc", "2", "--steps", "3")
    assert code == 0, output
    assert data["rank"] == 0 and [r["passed"] for r in data["ranks"]] == [True, True]
    assert "2 ranks each under torchrun" in output and "each of the 2 ranks agrees" in output
    names = {row["module"] for row in data["rows"]}
    assert modules <= names, names  # the model's own names, the wrappers' left out
    assert not any("_fsdp_wrapped_module" in n or n.startswith("module") for n in names), names
    assert len(data["steps"]) == 3 and all(step["passed"] for step in data["steps"])
    losses = [(s["loss_original"], s["loss_migrated"]) for s in data["steps"]]
    assert all(a == pytest.approx(b, rel=1e-6) for a, b in losses) and losses[2][0] < losses[0][0]
    assert data["steps"][0]["state_compared"] > 0  # parameters and AdamW's moments, gathered


def test_gradients_summed_where_ddp_averages_fail_at_the_rank_and_the_parameter(tmp_path: Path) -> None:
    code, data, output = verify(
        tmp_path, *pair("ddp", "migrated_summed_gradients"), "--nproc", "2", "--steps", "2"
    )
    assert code == 1, output
    assert data["first_divergence"] is None and all(r["passed"] for r in data["rows"]), "the forward agrees"
    assert data["rank"] == 0 and [r["passed"] for r in data["ranks"]] == [False, False]
    assert "ranks: rank 0 of 2 diverges first (diverging: ranks 0, 1)" in output
    assert "training diverges at step 1, first at gradient of 3.bias (the nearest the loss)" in output
    first = data["steps"][0]
    assert first["loss_original"] == pytest.approx(first["loss_migrated"], rel=1e-6)
    assert first["grad_norm_migrated"] == pytest.approx(2 * first["grad_norm_original"], rel=1e-5)


def test_an_entry_that_starts_no_process_group_is_told_how(tmp_path: Path) -> None:
    code, _, output = verify(tmp_path, *pair("cnn", "migrated"), "--nproc", "2")
    assert code == 2
    assert "error: the original side failed:\nrank 0 of 2: with --nproc the entry initialises" in output
    assert "Traceback" not in output and "ChildFailedError" not in output


def test_what_works_on_one_process_only_is_refused_up_front(tmp_path: Path) -> None:
    tree = CASES / "ddp" / "original"
    refused = run_cli(
        "verify",
        "--original",
        tree,
        "--migrated",
        tree,
        "--entry",
        "entry.py:build",
        "--nproc",
        "2",
        "--onnx",
        cwd=tmp_path,
    )
    assert refused.returncode == 2
    assert (
        refused.stderr.strip()
        == "error: --nproc runs the model in several ranks; --dump and --onnx work on one process"
    )


def test_names_are_the_models_own_under_any_wrapper() -> None:
    assert unwrapped("module.0.weight") == "0.weight"
    assert unwrapped("_fsdp_wrapped_module.blocks.0._fsdp_wrapped_module.up.weight") == "blocks.0.up.weight"
    assert unwrapped("module") == "" and unwrapped("blocks.0._fsdp_wrapped_module") == "blocks.0"
    assert unwrapped("encoder.module.weight") == "encoder.module.weight"  # a user's own `module`


# An entry whose ranks hang where the trainer builds its model, each saying it got there.
HANGS = """import os, pathlib, time


def build():
    pathlib.Path(os.environ["RANKS"], str(os.getpid())).touch()
    time.sleep(600)
"""


@pytest.mark.parametrize(("nproc", "timeout"), [(2, "60"), (20, "8")])
def test_a_side_past_its_timeout_is_stopped_with_every_rank(tmp_path: Path, nproc: int, timeout: str) -> None:
    """--timeout bounds the side however many ranks it has: torchrun starts each rank in a session
    of its own, which stopping torchrun's process group left running (and holding verify's pipes,
    so that verify waited for them)."""
    tree, ranks = tmp_path / "hangs", tmp_path / "ranks"
    tree.mkdir()
    ranks.mkdir()
    (tree / "entry.py").write_text(HANGS)
    result = run_cli(
        "verify", "--original", str(tree), "--migrated", str(tree), "--entry", "entry.py:build",
        "--nproc", str(nproc), "--timeout", timeout, cwd=tmp_path,
        env={"RANKS": str(ranks), MARKER: str(tmp_path)}, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert f"the original side failed:\nstill running after {timeout} s (--timeout)" in result.stderr
    if nproc == 2:
        assert len(list(ranks.iterdir())) == 2  # both ranks were in the entry when the time was up
    assert left_running(str(tmp_path)) == []


def test_sigterm_stops_verify_with_every_rank(tmp_path: Path) -> None:
    tree, ranks = tmp_path / "hangs", tmp_path / "ranks"
    tree.mkdir()
    ranks.mkdir()
    (tree / "entry.py").write_text(HANGS)
    command = [sys.executable, "-m", "npu_migrate", "verify", "--original", str(tree),
               "--migrated", str(tree), "--entry", "entry.py:build", "--nproc", "2"]  # fmt: skip
    env = {**os.environ, "RANKS": str(ranks), MARKER: str(tmp_path)}
    run = subprocess.Popen(command, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while len(list(ranks.iterdir())) < 2 and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    run.send_signal(signal.SIGTERM)
    stderr = run.communicate(timeout=300)[1]
    assert len(list(ranks.iterdir())) == 2, stderr  # both ranks were in the entry
    assert run.returncode == 143, stderr
    assert left_running(str(tmp_path)) == []
