"""Report paths checked before any run: a report never replaces a user's file of another kind,
and a folder that does not exist is a one-line error at once, not after the whole run."""

from __future__ import annotations

import pytest

from tests.fixture_cases import FIXTURES, run_cli

GPT = FIXTURES / "verify" / "gpt"


@pytest.mark.parametrize(
    ("option", "target", "message"),
    [
        ("--json", "original/model.py", "an existing file that is not a .json report; it is left alone"),
        ("--html", "original/entry.py", "an existing file that is not a .html or .htm report"),
        ("--json", "missing/report.json", "its folder does not exist"),
        ("--html", "original", "a folder; give a file"),
    ],
)
def test_verify_refuses_a_report_path_before_running(tmp_path, option, target, message):
    tree = tmp_path / "gpt"
    (tree / "original").mkdir(parents=True)
    for name in ("model.py", "entry.py"):
        (tree / "original" / name).write_bytes((GPT / "original" / name).read_bytes())
    before = {p: p.read_bytes() for p in (tree / "original").iterdir()}
    ran = run_cli(
        "verify", "--original", "original", "--migrated", str(GPT / "migrated"), "--entry", "entry.py:build",
        option, target, cwd=tree,
    )  # fmt: skip
    assert ran.returncode == 2
    assert message in " ".join(ran.stderr.split()), ran.stderr
    assert "verifying" not in ran.stderr and "Traceback" not in ran.stderr
    assert {p: p.read_bytes() for p in (tree / "original").iterdir()} == before


def test_tests_mode_refuses_too(tmp_path):
    (tmp_path / "test_a.py").write_text("def test_a():\n    assert True\n")
    ran = run_cli("verify", str(tmp_path), "--tests", "pytest", "--json", "test_a.py", cwd=tmp_path)
    assert ran.returncode == 2 and "an existing file that is not a .json report" in " ".join(
        ran.stderr.split()
    )
    assert (tmp_path / "test_a.py").read_text() == "def test_a():\n    assert True\n"


@pytest.mark.parametrize(
    "options",
    [["--rtol", "float32=nan"], ["--abs-fail", "nan"], ["--cosine-fail", "nan"], ["--loss-rtol", "inf"],
     ["--max-memory-ratio", "nan"], ["--abs-warn", "-inf"]],
)  # fmt: skip
def test_verify_refuses_thresholds_that_decide_nothing(tmp_path, options):
    """NaN compares false with everything: an output shifted by 2.0 would read as PASS."""
    ran = run_cli(
        "verify", "--original", str(GPT / "original"), "--migrated", str(GPT / "migrated_wrong_scale"),
        "--entry", "entry.py:build", *options, cwd=tmp_path,
    )  # fmt: skip
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert "a threshold must be a finite number" in " ".join(ran.stderr.split())
    assert "Traceback" not in ran.stderr


@pytest.mark.parametrize(
    ("options", "words"),
    [(["--timeout", "nan"], "--timeout nan: a time limit must be a finite number"),
     (["--timeout", "inf"], "--timeout inf: a time limit must be a finite number"),
     (["--max-side-memory", "nan"], "--max-side-memory nan: a memory cap must be a finite number")],
)  # fmt: skip
def test_verify_refuses_a_time_limit_or_memory_cap_that_is_no_number(tmp_path, options, words):
    """NaN passes the options' range checks (it compares false with their bounds): it was an
    internal error once the side started."""
    ran = run_cli(
        "verify", "--original", str(GPT / "original"), "--migrated", str(GPT / "migrated"),
        "--entry", "entry.py:build", *options, cwd=tmp_path,
    )  # fmt: skip
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert ran.stderr == f"error: {words}\n"
