"""Python a shell command runs from the script's own text (`python -c CODE`, a heredoc fed to
`python`): read by the engine where it is, rewritten between its quotes where the shell hands
Python the rewrite as written. Before, `NGPU=$(python -c "import torch;
print(torch.cuda.device_count())")`, the way launch scripts count their GPUs, was not reported."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from npu_migrate.engine.source import migrate_source
from npu_migrate.handlers.embedded_python import FILLED, QUOTING, Code
from npu_migrate.model import Applicability
from npu_migrate.pipeline import RuleSource
from tests.fixture_cases import run_cli
from tests.test_hostile_gate import notebook

# A launch script in the form real ones take (Megatron-style NGPU counting, a rank's device from
# torchrun's variables, a check run from a heredoc); the code is kept in quotes of every kind.
LAUNCH = """#!/bin/bash
NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())")
python -c "import torch; torch.cuda.set_device($LOCAL_RANK); print(\\"rank\\", ${RANK:-0})"
python -c 'import torch
print(torch.cuda.is_available())'
python - <<'EOF'
import torch
assert torch.cuda.is_available(), "no $GPU"
EOF
/usr/bin/python3.10 -u <<EOF
import torch
torch.cuda.set_device($LOCAL_RANK)
EOF
torchrun --nproc_per_node=$NGPU train.py
"""

# bash with `python` (any of the script's) recording the code it is handed, NUL-separated
RECORDER = """
record() { if [ "$1" = -u ]; then shift; fi
           if [ "$1" = -c ]; then printf '%s\\0' "$2"; else cat; printf '\\0'; fi >> "$OUT"; }
python() { record "$@"; }; python3() { record "$@"; }; python3.10() { record "$@"; }; torchrun() { :; }
LOCAL_RANK=3 RANK=1
"""


def handed_to_python(script: Path, tmp_path: Path) -> list[str]:
    """The code each python command of the script is handed when bash runs it (a python named by
    its path runs as the recorder of its name: no function has a path for a name)."""
    out = tmp_path / "handed"
    out.write_bytes(b"")
    text = RECORDER + script.read_text().replace("/usr/bin/python3.10", "python3.10")
    subprocess.run(["bash", "-c", text], env={"OUT": str(out), "PATH": "/usr/bin:/bin"}, check=True)
    return out.read_text().split("\0")[:-1]


def migrated_alone(code: str) -> str:
    """The engine's rewrite of the code as a module of its own (by default: the safe fixes)."""
    result = migrate_source(code.encode(), RuleSource([]).index, frozenset({Applicability.safe}))
    return (result.new_source or code.encode()).decode()


def test_python_a_script_runs_from_its_text_is_handed_to_python_as_the_engine_rewrites_it(
    tmp_path: Path,
) -> None:
    script = tmp_path / "launch.sh"
    script.write_text(LAUNCH)
    before = handed_to_python(script, tmp_path)
    assert len(before) == 5 and all("torch.cuda." in code for code in before)
    scanned = run_cli("scan", script.name, cwd=tmp_path)
    for place in (
        "launch.sh:2:40:",
        "launch.sh:3:26:",
        "launch.sh:5:7:",
        "launch.sh:8:8:",
        "launch.sh:12:1:",
    ):
        assert f"{place} NPU101 [safe]" in scanned.stdout, scanned.stdout
    applied = run_cli("apply", script.name, "--no-change-list", cwd=tmp_path)
    assert applied.returncode == 0, applied.stderr
    after = handed_to_python(script, tmp_path)
    assert after == [migrated_alone(code) for code in before]
    assert all("torch.npu." in code and "torch.cuda" not in code for code in after)
    assert "$LOCAL_RANK" in script.read_text(), "what the shell fills in is kept as written"


def test_a_fix_the_quoting_cannot_hold_is_held(tmp_path: Path) -> None:
    """GradScaler's fix adds `device="npu"`: a double quote ends a double-quoted `-c` string, and
    a single-quoted one holds it."""
    script = tmp_path / "check.sh"
    original = (
        'python -c "import torch; s = torch.amp.GradScaler()"\n'
        "python -c 'import torch; s = torch.amp.GradScaler()'\n"
    )
    script.write_text(original)
    applied = run_cli("apply", script.name, "--no-change-list", cwd=tmp_path)
    assert "check.sh:1:30: NPU303 [held]" in applied.stdout, applied.stdout
    assert "the fixed code holds what the shell's quoting around it would read" in applied.stdout
    assert script.read_text().splitlines() == [
        original.splitlines()[0],
        "python -c 'import torch; import torch_npu; s = torch.amp.GradScaler(device=\"npu\")'",
    ]


def test_dockerfiles_makefiles_and_notebook_lines_run_python_from_their_text_too(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text(
        'FROM python:3.11\nRUN python -c "import torch; assert torch.cuda.is_available()"\n'
    )
    (tmp_path / "Makefile").write_text(
        'gpus:\n\tpython -c "import torch; print(torch.cuda.device_count())"\n'
        "\tpython -c 'import torch, os; print(torch.cuda.device_count(), os.environ[\"$$HOME\"])'\n"
    )
    counted = '!python -c "import torch; print(torch.cuda.device_count())"\n'
    (tmp_path / "nb.ipynb").write_text(notebook(counted))
    applied = run_cli("apply", ".", "--no-change-list", cwd=tmp_path)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert (
        'RUN python -c "import torch; import torch_npu; assert torch.npu.is_available()"'
        in (tmp_path / "Dockerfile").read_text()
    )
    makefile = (tmp_path / "Makefile").read_text().splitlines()
    assert makefile[1] == '\tpython -c "import torch; import torch_npu; print(torch.npu.device_count())"'
    # make hands the shell `$HOME` for `$$HOME`: kept as make spells it
    assert makefile[2] == "\tpython -c 'import torch, os; import torch_npu; print(" + (
        'torch.npu.device_count(), os.environ["$$HOME"])\''
    )
    source = json.loads((tmp_path / "nb.ipynb").read_text())["cells"][0]["source"]
    assert source == ['!python -c "import torch; import torch_npu; print(torch.npu.device_count())"\n']


def test_what_is_no_python_code_to_read_is_left_to_the_shell(tmp_path: Path) -> None:
    """A script's own arguments after its name, a module's, and Python 2 that does not parse."""
    script = tmp_path / "other.sh"
    original = (
        'python train.py -c "torch.cuda.synchronize()"\n'
        'python -m tool -c "torch.cuda.synchronize()"\n'
        "python2 -c 'print \"x\"; import torch; torch.cuda.synchronize()'\n"
    )
    script.write_text(original)
    scanned = run_cli("scan", script.name, cwd=tmp_path)
    assert scanned.returncode == 0, scanned.stdout + scanned.stderr
    assert run_cli("apply", script.name, "--no-change-list", cwd=tmp_path).returncode == 0
    assert script.read_text() == original


def test_a_rewrite_that_edits_what_the_shell_fills_in_is_held() -> None:
    """`$A` reaches Python as its value, which the engine reads as underscores: an edit there
    would be an edit of the variable's name, not of the code Python runs."""
    spelled = b"x = $A.cuda()"
    code = Code(0, len(spelled), b"x = __.cuda()", forbidden=b'"$`\\')
    assert code.rewritten(spelled, b"x = __.npu()") == b"x = $A.npu()"
    assert code.rewritten(spelled, b"x = y.npu()") is FILLED
    assert code.rewritten(spelled, b"x = _z_.npu()") is FILLED, "an insertion inside it"
    assert code.rewritten(spelled, b'x = __.to("npu")') is QUOTING


def test_a_python_file_a_dockerfile_writes_with_a_copy_heredoc_is_read_and_migrated(tmp_path: Path) -> None:
    """`COPY <<EOF /app/x.py` (BuildKit's heredocs) writes a Python file into the image: it was
    never read. BuildKit fills in `${NAME}` where the delimiter is unquoted: kept as written."""
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(
        "FROM python:3.11\n"
        "ARG RANK=0\n"
        "COPY <<EOF /app/check.py\n"
        "import torch\n"
        "torch.cuda.set_device(${RANK})\n"
        "EOF\n"
        "COPY <<'PY' /app/run\n"
        "#!/usr/bin/env python3\n"
        "import torch\n"
        "x = torch.ones(2).cuda()\n"
        "PY\n"
        "COPY <<EOF /app/notes.txt\n"
        "torch.cuda is what we ran on\n"
        "EOF\n"
        "COPY <<EOF /app/open.py\n"
        "import torch\n"
        "torch.cuda.synchronize()\n"
    )
    scanned = run_cli("scan", dockerfile.name, cwd=tmp_path)
    assert (
        "Dockerfile:5:1: NPU101 [safe]" in scanned.stdout
        and "Dockerfile:10:5: NPU103 [safe]" in scanned.stdout
    )
    assert "Dockerfile:13:" not in scanned.stdout and "Dockerfile:17:" not in scanned.stdout  # text; no end
    assert run_cli("apply", dockerfile.name, "--no-change-list", cwd=tmp_path).returncode == 0
    lines = dockerfile.read_text().splitlines()
    assert lines[3:7] == ["import torch", "import torch_npu", "torch.npu.set_device(${RANK})", "EOF"]
    assert lines[9:12] == ["import torch", "import torch_npu", "x = torch.ones(2).npu()"]
    assert lines[-1] == "torch.cuda.synchronize()", "a heredoc with no terminator is left alone"
