"""The command line starts cheaply (issue 23): `--version`, `--help`, and a scan whose results are
cached import neither libcst nor the rule catalog's loading (yaml, the pydantic rule models);
only a run that has files to look at loads the rules and the engine. What this saves in seconds is
benchmarks/startup.py's to measure; these tests hold the imports that would undo it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.fixture_cases import run_cli
from tests.test_cli import CUDA_FILE

HEAVY = ("libcst", "yaml", "npu_migrate.rules.schema", "npu_migrate.engine.index")


def imports(*args: str, cwd: Path, cache: Path) -> set[str]:
    """The modules a run of the command line imports, in any of its processes."""
    env = {"PYTHONPROFILEIMPORTTIME": "1", "XDG_CACHE_HOME": str(cache)}
    result = run_cli(*args, cwd=cwd, env=env)
    assert result.returncode in (0, 1), result.stderr
    lines = [line.split("|") for line in result.stderr.splitlines() if line.startswith("import time:")]
    return {parts[2].strip() for parts in lines if len(parts) == 3}


def test_registering_the_commands_imports_nothing_heavy() -> None:
    """typer reads every command's signature: their modules keep the engine out of their imports."""
    code = (
        "import sys, typer.main; from npu_migrate.cli import app; typer.main.get_command(app); "
        f"print(sorted(m for m in {(*HEAVY, 'pydantic')!r} if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_version_help_and_a_cached_scan_load_neither_engine_nor_rules(tmp_path: Path) -> None:
    (tmp_path / "plain.py").write_text("import math\n\n\ndef norm(x, y):\n    return math.hypot(x, y)\n")
    (tmp_path / "cuda.py").write_text(CUDA_FILE)
    cache = tmp_path / "cache"
    for args in (["--version"], ["--help"], ["rules", "--help"]):
        heavy = imports(*args, cwd=tmp_path, cache=cache) & set(HEAVY)
        assert not heavy, (args, sorted(heavy))
    for name in ("plain.py", "cuda.py"):
        imports("scan", name, cwd=tmp_path, cache=cache)  # the first run loads the rules, fills the cache
        heavy = imports("scan", name, cwd=tmp_path, cache=cache) & set(HEAVY)
        assert not heavy, (name, sorted(heavy))


def test_a_new_file_no_rule_can_match_loads_neither_engine_nor_rules(tmp_path: Path) -> None:
    """A pre-commit hook's usual run: files it has not seen, most with no CUDA code. After one run
    of the rule set, the prefilter kept in the cache passes them, with the result the engine
    gives; a file a rule may match still goes through the engine."""
    cache = tmp_path / "cache"
    (tmp_path / "first.py").write_text("x = 1\n")
    imports("scan", "first.py", cwd=tmp_path, cache=cache)  # the rule set's prefilter is kept
    (tmp_path / "plain.py").write_text("import math\n\n\ndef norm(x, y):\n    return math.hypot(x, y)\n")
    heavy = imports("scan", "plain.py", cwd=tmp_path, cache=cache) & set(HEAVY)
    assert not heavy, sorted(heavy)
    (tmp_path / "cuda.py").write_text(CUDA_FILE)
    assert "libcst" in imports("scan", "cuda.py", cwd=tmp_path, cache=cache)
    for name in ("plain.py", "cuda.py"):
        env = {"XDG_CACHE_HOME": str(cache)}
        cached = run_cli("scan", name, "--format", "json", cwd=tmp_path, env=env).stdout
        assert cached == run_cli("scan", name, "--format", "json", "--no-cache", cwd=tmp_path).stdout
