"""The CI gate through the command line: suggestions and notes never fail by default, `--fail-on`
chooses the least severe finding that does,
`--exit-zero` keeps the report without the failure, tool errors stay exit 2, and the last line says
what the exit code means."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fixture_cases import FIXTURES, run_cli
from tests.test_cli import CUDA_FILE, project

BELOW = "below it, which do not fail"
NOTE_ONLY = "import torch.nn as nn\n\nact = nn.GELU()\n"  # NPU908: a faster op exists, nothing to do


def last_line(stderr: str) -> str:
    return stderr.strip().splitlines()[-1]


def test_a_migrated_repository_with_only_notes_left_passes(tmp_path: Path) -> None:
    migrated = tmp_path / "migrated"
    applied = run_cli(
        "apply", FIXTURES / "verify" / "gpt" / "original", "--unsafe", "--out", migrated,
        "--change-list", tmp_path / "changes.csv", cwd=tmp_path,
    )  # fmt: skip
    assert applied.returncode == 0, applied.stderr
    assert "Left as it is (1: 1 note):" in applied.stdout
    scan = run_cli("scan", migrated, cwd=tmp_path)
    assert scan.returncode == 0, scan.stdout
    assert "NPU908 [note]" in scan.stdout and "0 need a human, 1 note(s)" in scan.stdout
    assert last_line(scan.stderr) == "exit 0: nothing at or above --fail-on warning; 1 " + BELOW


def test_fail_on_chooses_the_least_severe_finding_that_fails(tmp_path: Path) -> None:
    root = project(tmp_path, {"note.py": NOTE_ONLY})
    assert run_cli("scan", root, cwd=tmp_path).returncode == 0
    (root / "cuda.py").write_text(CUDA_FILE)  # two findings of severity error, with a safe fix
    (root / "smi.py").write_text("import pynvml\n")  # NPU808, warning: NVIDIA's driver queries
    default = run_cli("scan", root, cwd=tmp_path)
    assert default.returncode == 1
    assert last_line(default.stderr) == ("exit 1: 3 finding(s) at or above --fail-on warning; 1 " + BELOW)
    error = run_cli("scan", root, "--fail-on", "error", cwd=tmp_path)
    assert last_line(error.stderr) == "exit 1: 2 finding(s) at or above --fail-on error; 2 " + BELOW
    marked = {line.split(": ")[1].split()[0]: line.endswith(" ✗") for line in error.stdout.splitlines()[:4]}
    assert marked == {"NPU101": True, "NPU103": True, "NPU808": False, "NPU908": False}  # what fails, marked
    (root / "cuda.py").unlink()
    assert run_cli("scan", root, "--fail-on", "error", cwd=tmp_path).returncode == 0
    info = run_cli("scan", root, "--fail-on", "info", cwd=tmp_path)
    assert info.returncode == 1
    assert last_line(info.stderr) == "exit 1: 2 finding(s) at or above --fail-on info"
    bad = run_cli("scan", root, "--fail-on", "sometimes", cwd=tmp_path)
    assert bad.returncode == 2 and "'sometimes' is not one of 'error', 'warning', 'info'" in bad.stderr


DEVICE_AGNOSTIC = """import torch
import torch.nn.functional as F


def step(model, q, k, v, x, weight):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return optimizer, out, F.rms_norm(x, (x.shape[-1],), weight)
"""


def test_fused_operator_suggestions_on_device_agnostic_code_never_fail_by_default(tmp_path: Path) -> None:
    """AdamW, SDPA and rms_norm run on an NPU as they are: the NPU's fused operators are
    suggestions (severity info), shown, never failing the gate unless --fail-on info asks."""
    root = project(tmp_path, {"model.py": DEVICE_AGNOSTIC})
    scan = run_cli("scan", root, cwd=tmp_path)
    assert scan.returncode == 0, scan.stderr
    shown = {line.split()[1] for line in scan.stdout.splitlines() if ": NPU9" in line}
    assert shown == {"NPU910", "NPU901", "NPU904"}, scan.stdout
    assert last_line(scan.stderr) == "exit 0: nothing at or above --fail-on warning; 3 " + BELOW
    sarif = json.loads(run_cli("scan", root, "--format", "sarif", cwd=tmp_path).stdout)
    assert {r["level"] for r in sarif["runs"][0]["results"]} == {"note"}
    github = run_cli("scan", root, "--format", "github", cwd=tmp_path).stdout
    assert [line.split()[0] for line in github.splitlines()] == ["::notice"] * 3
    gitlab = json.loads(run_cli("scan", root, "--format", "gitlab", cwd=tmp_path).stdout)
    assert {i["severity"] for i in gitlab} == {"info"}
    assert run_cli("scan", root, "--fail-on", "info", cwd=tmp_path).returncode == 1


def test_exit_zero_reports_but_passes(tmp_path: Path) -> None:
    root = project(tmp_path, {"cuda.py": CUDA_FILE})
    result = run_cli("scan", root, "--exit-zero", cwd=tmp_path)
    assert result.returncode == 0 and "NPU103" in result.stdout
    assert last_line(result.stderr) == "exit 0 (--exit-zero): 2 finding(s) at or above --fail-on warning"


def test_a_file_that_cannot_be_read_fails_like_a_finding_not_as_a_tool_error(tmp_path: Path) -> None:
    """Exit 2 is the tool's or its options' failure (as in ruff); input it cannot parse is the
    input's: reported for that file, failing the gate like a finding, passing under --exit-zero."""
    root = project(tmp_path, {"clean.py": "x = 1\n", "broken.py": "x = torch.cuda.synchronize(\n"})
    broken = run_cli("scan", root, cwd=tmp_path)
    assert broken.returncode == 1, broken.stderr
    assert "not read" in broken.stdout and "broken.py" in broken.stdout
    not_read = "exit 1: 0 finding(s) at or above --fail-on warning; 1 file(s) not read"
    assert last_line(broken.stderr) == not_read
    assert run_cli("scan", root, "--exit-zero", cwd=tmp_path).returncode == 0
    sarif = json.loads(run_cli("scan", root, "--format", "sarif", cwd=tmp_path).stdout)
    invocation = sarif["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is True
    assert "broken.py: not read" in invocation["toolExecutionNotifications"][0]["message"]["text"]
    github = run_cli("scan", root, "--format", "github", cwd=tmp_path).stdout
    assert "broken.py,title=not read::line 1: cannot parse" in github


def test_nothing_read_says_why_each_file_was_skipped(tmp_path: Path) -> None:
    root = project(
        tmp_path, {"README.md": "# a model\n", "notes.txt": "cuda\n", "logo.png": b"\x89PNG\r\n\0"}
    )
    why = (
        "nothing was read: every file was skipped "
        "(README.md, notes.txt, logo.png: not a kind of file npu-migrate reads)"
    )
    for command in (["scan", "--format", "json"], ["apply", "--dry-run"]):  # the report on stdout or not
        result = run_cli(*command, "README.md", "notes.txt", "logo.png", cwd=root)
        assert result.returncode == 2 and last_line(result.stderr) == f"exit 2: {why}", command
    (root / "more").mkdir()
    for n in range(4):
        (root / "more" / f"{n}.md").write_text("x\n")
    many = run_cli("scan", *(f"more/{n}.md" for n in range(4)), cwd=root)
    assert last_line(many.stderr).endswith(
        "(more/0.md, more/1.md, more/2.md and 1 more: not a kind of file npu-migrate reads)"
    )


def test_apply_fails_only_on_what_it_leaves_undone(tmp_path: Path) -> None:
    root = project(tmp_path, {"cuda.py": CUDA_FILE, "note.py": NOTE_ONLY})
    done = run_cli("apply", root, "--change-list", tmp_path / "c.csv", cwd=tmp_path)
    assert done.returncode == 0, done.stdout
    assert last_line(done.stderr) == "exit 0: nothing at or above --fail-on warning; 1 " + BELOW
