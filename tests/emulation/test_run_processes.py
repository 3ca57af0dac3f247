"""`run --emulate` ends with every process it started, however it ends: SIGTERM or SIGHUP while
torchrun's ranks (each in a session of its own) run or while torchrun starts them, Ctrl-C twice, a
daemon the script leaves behind, ranks that ignore the signals that stop a run; and it exits as a
shell would, 128 + the signal that killed the launcher. A launch script that sets PATH or PYTHONPATH
outright keeps the emulated host's npu-smi and the stand-in torch_npu; --npus is an Ascend host's
count at most."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixture_cases import MARKER, left_running, run_cli

HANG_GUARD = 300  # seconds: a run that never ends fails the test instead of hanging it

# A rank that ignores the signals that stop a run, and says it started (a file named by its pid).
RANK = """import os, pathlib, signal, sys, time
for each in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(each, signal.SIG_IGN)
pathlib.Path(sys.argv[1], str(os.getpid())).touch()
time.sleep(600)
"""


def start(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    """`run --emulate ARGS` in tmp_path (holding rank.py and an empty ranks/), its processes marked."""
    (tmp_path / "rank.py").write_text(RANK)
    (tmp_path / "ranks").mkdir()
    return subprocess.Popen(
        [sys.executable, "-m", "npu_migrate", "run", "--emulate", *args],
        cwd=tmp_path,
        env={**os.environ, MARKER: str(tmp_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(run: subprocess.Popen[str], path: Path, count: int = 1) -> None:
    """Until `count` files are in the folder `path` (or `path` exists, for a file), the run still
    going."""
    deadline = time.monotonic() + HANG_GUARD
    while (len(list(path.iterdir())) if path.is_dir() else int(path.exists())) < count:
        if run.poll() is not None or time.monotonic() > deadline:
            run.kill()
            pytest.fail("the run ended or hung before its processes started: " + run.communicate()[1])
        time.sleep(0.1)


def ended(run: subprocess.Popen[str]) -> str:
    """The run's stderr once it ends."""
    return run.communicate(timeout=HANG_GUARD)[1]


TORCHRUN = "touch started\ntorchrun --standalone --nproc_per_node=2 rank.py ranks\n"


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_ends_the_ranks_torchrun_started_from_a_launch_script(
    tmp_path: Path, signum: int, code: int
) -> None:
    """SIGHUP (the terminal closed) ended the run at once and left the ranks running."""
    (tmp_path / "launch.sh").write_text(TORCHRUN)
    run = start(tmp_path, "launch.sh")
    wait_for(run, tmp_path / "ranks", 2)
    run.send_signal(signum)
    stderr = ended(run)
    assert run.returncode == code, stderr
    assert left_running(str(tmp_path)) == []


def test_sigterm_while_torchrun_starts_its_ranks_ends_torchrun_and_them(tmp_path: Path) -> None:
    (tmp_path / "launch.sh").write_text(TORCHRUN)
    run = start(tmp_path, "launch.sh")
    wait_for(run, tmp_path / "started")
    run.send_signal(signal.SIGTERM)
    stderr = ended(run)
    assert run.returncode == 143, stderr
    assert left_running(str(tmp_path)) == []


def test_ctrl_c_twice_ends_the_run_and_the_ranks_in_sessions_of_their_own(tmp_path: Path) -> None:
    (tmp_path / "launch.sh").write_text(
        "setsid python rank.py ranks &\nsetsid python rank.py ranks &\nwait\n"
    )
    run = start(tmp_path, "launch.sh")
    wait_for(run, tmp_path / "ranks", 2)
    run.send_signal(signal.SIGINT)
    run.send_signal(signal.SIGINT)
    stderr = ended(run)
    assert run.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert left_running(str(tmp_path)) == []


@pytest.mark.parametrize(
    ("script", "text"),
    [
        ("launch.sh", '(setsid python rank.py ranks &)\nwhile [ -z "$(ls ranks)" ]; do sleep 0.1; done\n'),
        (
            "train.py",
            "import subprocess, sys, time\nfrom pathlib import Path\n"
            "subprocess.Popen([sys.executable, 'rank.py', 'ranks'], start_new_session=True)\n"
            "while not any(Path('ranks').iterdir()):\n    time.sleep(0.1)\n",
        ),
    ],
)
def test_a_daemon_the_script_leaves_behind_is_gone_when_the_run_ends(
    tmp_path: Path, script: str, text: str
) -> None:
    (tmp_path / script).write_text(text)
    run = start(tmp_path, script)
    stderr = ended(run)
    assert run.returncode == 0, stderr
    assert any((tmp_path / "ranks").iterdir())  # the daemon started
    assert left_running(str(tmp_path)) == []


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGKILL, 137)])
def test_a_launcher_killed_by_a_signal_exits_as_a_shell_says(tmp_path: Path, signum: int, code: int) -> None:
    (tmp_path / "launch.sh").write_text(f"echo started\nkill -{signum} $$\necho never\n")
    result = run_cli("run", "--emulate", "launch.sh", cwd=tmp_path, timeout=HANG_GUARD)
    assert result.returncode == code, result.stderr
    assert result.stdout == "started\n"


def test_a_launch_script_that_sets_path_and_pythonpath_keeps_npu_smi_and_the_stand_in(tmp_path: Path) -> None:
    (tmp_path / "launch.sh").write_text(
        "set -eux\nexport PYTHONPATH=/nowhere\nexport PATH=/usr/bin:/bin\n"
        "npu-smi info -l | grep -c 'NPU ID'\n"
        'mkdir -p made && echo "$_"\n'
        f"{sys.executable} -c 'import sys, torch, torch_npu; print(torch.npu.device_count(), sys.path[2])'\n"
    )
    result = run_cli("run", "--emulate", "--npus", "2", "launch.sh", cwd=tmp_path, timeout=HANG_GUARD)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "made", "2", "/nowhere"]  # the script's folder stays on the path
    assert "__npu_migrate" not in result.stderr  # set -x traces the script's commands, not the emulation's


def test_npus_beyond_what_an_ascend_host_holds_are_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "launch.sh").write_text("npu-smi info -l\n")
    result = run_cli("run", "--emulate", "--npus", "100000000", "launch.sh", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == "error: --npus 100000000: an Ascend host holds at most 16 NPUs\n"
    sixteen = run_cli("run", "--emulate", "--npus", "16", "launch.sh", cwd=tmp_path)
    assert sixteen.returncode == 0 and "Total Count                    : 16" in sixteen.stdout
