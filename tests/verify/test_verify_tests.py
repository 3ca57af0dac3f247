"""verify TREE --tests: a project's own pytest suite on the original and on the migrated copy
under the NPU emulation, compared test by test, regressions bisected to the change that breaks
them; end to end through the command line, and the comparison unit by unit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from npu_migrate.verify.tests import NotPytest, SuiteRun, compare, pytest_arguments
from tests.fixture_cases import FIXTURES, MARKER, left_running, run_cli

# A user rule that breaks the program (torch.zeros -> torch.ones): the bisection must name it.
BAD_RULE = """category: house
codes: HOU1xx
description: a deliberately wrong rewrite
rules:
  - code: HOU101
    name: zeros-to-ones
    summary: s
    why: w
    message: m
    applicability: safe
    severity: error
    match: {name: [torch.zeros]}
    fix: {rename: {torch.zeros: torch.ones}, add_import: []}
    examples:
      - before: "import torch\\nx = torch.zeros(3)\\n"
        after: "import torch\\nx = torch.ones(3)\\n"
"""

PROJECT = {
    "lib.py": (
        "import torch\n\n\ndef empty(n):\n    return torch.zeros(n)\n\n\n"
        "def sync():\n    torch.cuda.synchronize()\n"
    ),
    "tests/test_lib.py": (
        "from lib import empty\n\n\ndef test_empty_is_zero():\n    assert empty(3).sum() == 0\n\n\n"
        "def test_arithmetic():\n    assert 1 + 1 == 2\n\n\ndef test_broken_before():\n    assert False\n"
    ),
}


def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    for name, text in PROJECT.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_a_correct_migration_passes_test_by_test(tmp_path: Path) -> None:
    root = project(tmp_path)
    report = tmp_path / "r.json"
    result = run_cli("verify", str(root), "--tests", "pytest -q tests", "--json", str(report), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        "PASS: none of the 2 test(s) that passed on the original fails on the migrated copy" in result.stdout
    )
    assert "tests on the original: 1 failed, 2 passed" in result.stderr
    data = json.loads(report.read_text())
    assert data["passed"] and data["regressions"] == []
    assert data["migrated"]["status"]["tests/test_lib.py::test_broken_before"] == "failed"
    assert (root / "lib.py").read_text() == PROJECT["lib.py"]  # the user's tree is not touched


def test_a_regression_is_named_with_the_change_that_breaks_it(tmp_path: Path) -> None:
    root = project(tmp_path)
    rules = tmp_path / "bad.yaml"
    rules.write_text(BAD_RULE)
    html = tmp_path / "r.html"
    tests = "python -m pytest -q tests"
    result = run_cli(
        "verify", str(root), "--tests", tests, "--rules", str(rules), "--html", str(html), cwd=tmp_path
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAIL: 1 test(s) passed on the original and fail on the migrated copy:" in result.stdout
    assert "tests/test_lib.py::test_empty_is_zero: failed: assert" in result.stdout
    assert "comes from HOU101 in" in result.stdout and "lib.py" in result.stdout
    assert "line 5: torch.zeros  ->  torch.ones" in result.stdout
    page = html.read_text()
    assert "FAIL" in page and "test_empty_is_zero" in page and "HOU101" in page


def test_both_sides_run_under_a_root_of_the_tree_s_name(tmp_path: Path) -> None:
    """mmengine's logger test builds a regular expression from its own `__file__`: a side whose
    path differs in more than its temporary parent passes it on one side only."""
    root = project(tmp_path)
    (root / "tests" / "test_where.py").write_text(
        "from pathlib import Path\n\n\ndef test_root_name():\n"
        "    assert Path(__file__).resolve().parent.parent.name == 'proj'\n"
    )
    report = tmp_path / "r.json"
    result = run_cli("verify", str(root), "--tests", "pytest -q tests", "--json", str(report), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    sides = json.loads(report.read_text())
    assert sides["original"]["status"]["tests/test_where.py::test_root_name"] == "passed"
    assert sides["migrated"]["status"]["tests/test_where.py::test_root_name"] == "passed"


def test_a_side_past_its_time_limit_is_stopped_and_fails(tmp_path: Path) -> None:
    root = project(tmp_path)
    (root / "tests" / "test_slow.py").write_text("import time\n\n\ndef test_slow():\n    time.sleep(60)\n")
    result = run_cli("verify", str(root), "--tests", "pytest -q tests", "--timeout", "8", cwd=tmp_path)
    assert result.returncode != 0
    assert "stopped at the time limit" in result.stderr


def test_a_side_past_its_time_limit_is_stopped_with_every_process_its_tests_started(tmp_path: Path) -> None:
    """A test that starts a process in a session of its own (as torchrun starts its ranks) and
    hangs: stopping pytest's process group left that process running, and verify waiting for it."""
    root = project(tmp_path)
    (root / "tests" / "test_hangs.py").write_text(
        "import os, subprocess, sys, time\nfrom pathlib import Path\n\n\ndef test_hangs():\n"
        "    sleep = [sys.executable, '-c', 'import time; time.sleep(600)']\n"
        "    subprocess.Popen(sleep, start_new_session=True)\n"
        "    Path(os.environ['STARTED']).touch()\n"
        "    time.sleep(600)\n"
    )
    started = tmp_path / "started"
    result = run_cli(
        "verify", str(root), "--tests", "pytest -q tests -k hangs", "--timeout", "30", cwd=tmp_path,
        env={"STARTED": str(started), MARKER: str(tmp_path)}, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "(stopped at the time limit)" in result.stderr
    assert started.exists()
    assert left_running(str(tmp_path)) == []


def test_bad_test_commands_get_one_line_errors(tmp_path: Path) -> None:
    root = project(tmp_path)
    for command, words in [("make test", "takes a pytest command"), ("pytest -q nowhere", "no test ran")]:
        result = run_cli("verify", str(root), "--tests", command, cwd=tmp_path)
        assert result.returncode == 2 and words in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    assert run_cli("verify", "--tests", "pytest", cwd=tmp_path).returncode == 2  # no TREE


@pytest.mark.parametrize(
    ("command", "arguments"),
    [("pytest -q tests", ["-q", "tests"]), ("python -m pytest -x 'a b.py'", ["-x", "a b.py"]),
     ("/usr/bin/python3 -m pytest", []), (".venv/bin/pytest -k 'x and y'", ["-k", "x and y"])],
)  # fmt: skip
def test_pytest_commands_are_read(command: str, arguments: list[str]) -> None:
    assert pytest_arguments(command) == arguments


def test_non_pytest_commands_are_refused() -> None:
    for command in ("make test", "tox", "python train.py", "pytest 'unclosed"):
        with pytest.raises(NotPytest):
            pytest_arguments(command)


def test_outcomes_are_compared_test_by_test() -> None:
    before = SuiteRun(status={"a": "passed", "b": "passed", "c": "failed", "d": "skipped", "e": "passed"})
    after = SuiteRun(
        status={"a": "passed", "b": "error", "c": "passed", "d": "failed"}, messages={"b": "boom"}
    )
    result = compare("pytest", before, after)
    assert [(r.test, r.after, r.message) for r in result.regressions] == [("b", "error", "boom")]
    assert result.fixed == ["c"] and result.not_run == ["e"] and not result.passed


def test_the_model_zoo_fixture_keeps_its_tests_passing() -> None:
    """The bundled model zoo (timm's and detectron2's forms): its own tests pass on the migrated
    copy under the emulation as on the original, its device test included (NPU tensors report
    the NPU)."""
    result = run_cli("verify", "src", "--tests", "pytest -q tests", cwd=FIXTURES / "model_zoo")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        "PASS: none of the 4 test(s) that passed on the original fails on the migrated copy" in result.stdout
    )


REACHING = {
    "model.py": (
        "import torch\n\nDEVICE = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n\n\n"
        "def ones(n, device=DEVICE):\n    return torch.ones(n, device=device)\n"
    ),
    "tests/test_model.py": (
        "import pytest\nimport torch\nfrom model import DEVICE, ones\n\n\n"
        "def test_on_the_accelerator_when_there_is_one():\n    assert ones(3).sum() == 3\n\n\n"
        "def test_on_the_cpu():\n    assert ones(3, 'cpu').sum() == 3\n\n\n"
        "def test_on_the_default_device():\n    assert torch.ones(3).sum() == 3\n\n\n"
        "def test_no_tensor():\n    assert DEVICE.type in ('cpu', 'cuda', 'npu')\n\n\n"
        "@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')\n"
        "def test_gated():\n    assert ones(2).device.type != 'cpu'\n\n\n"
        "@pytest.mark.skip(reason='needs 2 CUDA GPUs')\n"
        "def test_two_gpus():\n    pass\n"
    ),
}


def reaching(tmp_path: Path, *options: str) -> tuple[dict, str]:
    root = tmp_path / "reaching"
    for name, text in REACHING.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    report = tmp_path / "r.json"
    command = ["verify", str(root), "--tests", "pytest -q tests", "--json", str(report), *options]
    result = run_cli(*command, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(report.read_text()), result.stdout


def test_the_share_of_tests_that_reach_the_npu_is_measured(tmp_path: Path) -> None:
    """A suite that passes on the CPU alone proves nothing of the migration: each test says
    whether it put a tensor on the NPU, and the verdict counts them; a test the original skips
    for want of CUDA and the migrated copy runs is listed with its outcome."""
    data, output = reaching(tmp_path)
    assert "reach: 2 of the 5 test(s) that ran on the migrated copy put a tensor on the NPU" in output
    assert data["migrated"]["on_npu"] == [
        "tests/test_model.py::test_gated", "tests/test_model.py::test_on_the_accelerator_when_there_is_one",
    ]  # fmt: skip
    assert data["migrated"]["reach"] == [2, 5] and data["original"]["on_npu"] == []
    assert [(r["test"], r["after"]) for r in data["newly_run"]] == [
        ("tests/test_model.py::test_gated", "passed")
    ]
    assert "note: 1 test(s) skipped on the original run on the migrated copy: 1 passed" in output
    assert (
        "skipped on the migrated copy: 1 test(s): needs 2 CUDA GPUs; it asks for CUDA GPUs, which an NPU "
        "host never has" in output
    )


def test_the_npu_as_default_device_raises_the_reach(tmp_path: Path) -> None:
    data, output = reaching(tmp_path, "--tests-device", "npu")
    assert "reach: 3 of the 5 test(s)" in output
    assert "tests/test_model.py::test_on_the_default_device" in data["migrated"]["on_npu"]
    assert "tests/test_model.py::test_on_the_cpu" not in data["migrated"]["on_npu"]
