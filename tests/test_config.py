"""[tool.npu-migrate] in pyproject.toml through the command line: select and ignore by code or
prefix, per-file ignores, excludes, extra rules, unsafe and the fail level; the nearest config
applies; the command line overrides it; a bad config is one line."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fixture_cases import FIXTURES, run_cli
from tests.test_cli import CUDA_FILE, project


def codes(root: Path, *args: str) -> list[str]:
    result = run_cli("scan", ".", "--format", "json", *args, cwd=root)
    assert result.returncode in (0, 1), result.stderr
    return [f"{f['file']}:{f['code']}" for f in json.loads(result.stdout)["findings"]]


def test_select_ignore_and_per_file_ignores(tmp_path: Path) -> None:
    root = project(tmp_path, {"a.py": CUDA_FILE, "tests/t.py": CUDA_FILE, "vendor/v.py": CUDA_FILE})
    assert len(codes(root)) == 6
    (root / "pyproject.toml").write_text(
        '[tool.npu-migrate]\nignore = ["NPU101"]\nexclude = ["vendor/"]\n'
        '[tool.npu-migrate.per-file-ignores]\n"tests/*" = ["NPU1"]\n'
    )
    assert codes(root) == ["a.py:NPU103"], "no catch-all speaks for the ignored NPU101"
    assert codes(root, "--select", "NPU101") == [], "the config's ignore still holds"
    (root / "pyproject.toml").write_text('[tool.npu-migrate]\nselect = ["NPU101"]\n')
    assert sorted(codes(root)) == ["a.py:NPU101", "tests/t.py:NPU101", "vendor/v.py:NPU101"]
    assert len(codes(root, "--extend-select", "NPU103")) == 6
    assert codes(root, "--ignore", "npu101") == []


def test_ignored_rules_are_not_fixed_either(tmp_path: Path) -> None:
    root = project(tmp_path, {"a.py": CUDA_FILE})
    (root / "pyproject.toml").write_text('[tool.npu-migrate]\nignore = ["NPU103"]\n')
    result = run_cli("apply", ".", "--change-list", tmp_path / "c.csv", cwd=root)
    assert result.returncode == 0, result.stdout
    text = (root / "a.py").read_text()
    assert "torch.zeros(2).cuda()" in text and "torch.npu.synchronize()" in text


def test_unsafe_and_fail_on_and_rules_come_from_the_config(tmp_path: Path) -> None:
    root = project(tmp_path, {"smi.py": "import pynvml\n", "a.py": CUDA_FILE})
    (root / "pyproject.toml").write_text('[tool.npu-migrate]\nfail-on = "error"\n')
    assert run_cli("scan", ".", cwd=root).returncode == 1
    (root / "a.py").unlink()
    assert run_cli("scan", ".", cwd=root).returncode == 0, "NPU808 is a warning, below error"
    assert run_cli("scan", ".", "--fail-on", "warning", cwd=root).returncode == 1
    gpt = tmp_path / "gpt"
    (gpt / "src").mkdir(parents=True)
    for name in ("model.py", "entry.py"):
        (gpt / "src" / name).write_bytes((FIXTURES / "verify" / "gpt" / "original" / name).read_bytes())
    (gpt / "pyproject.toml").write_text("[tool.npu-migrate]\nunsafe = true\n")
    dry = run_cli("apply", "src", "--dry-run", cwd=gpt)
    assert "would rewrite 2 file(s), 4 change(s)" in dry.stdout, "NPU901's unsafe fix is on"
    safe_only = run_cli("apply", "src", "--dry-run", "--no-unsafe", cwd=gpt)
    assert "would rewrite 1 file(s), 2 change(s)" in safe_only.stdout


def test_the_nearest_config_applies_and_bad_ones_are_one_line(tmp_path: Path) -> None:
    root = project(tmp_path, {"inner/a.py": CUDA_FILE})
    (root / "pyproject.toml").write_text('[tool.npu-migrate]\nignore = ["NPU103"]\n')
    (root / "inner" / "pyproject.toml").write_text('[tool.npu-migrate]\nignore = ["NPU101"]\n')
    assert codes(root / "inner") == ["a.py:NPU103"]
    (root / "inner" / "pyproject.toml").write_text("[project]\nname = 'x'\n")  # no table: look further up
    assert codes(root / "inner") == ["a.py:NPU101"]
    (root / "pyproject.toml").write_text('[tool.npu-migrate]\nignor = ["NPU103"]\n')
    bad = run_cli("scan", root, cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.strip().endswith("[tool.npu-migrate] ignor: Extra inputs are not permitted")
    other = tmp_path / "npu.toml"
    other.write_text('select = ["NPU103"]\n')
    assert codes(root / "inner", "--config", str(other)) == ["a.py:NPU103"]


def test_a_pyproject_whose_tool_is_no_table_is_not_an_internal_error(tmp_path: Path) -> None:
    """`tool = 5` (a vendored project's, or the user's own) ended the run in "internal error:
    AttributeError"; it names no table of ours, so it configures nothing. `tool.npu-migrate = 5`
    does name ours, wrongly: one line, exit 2."""
    root = project(tmp_path, {"vendor/lib/a.py": CUDA_FILE, "b.py": CUDA_FILE})
    (root / "vendor" / "lib" / "pyproject.toml").write_text("tool = 5\n[project]\nname = 'lib'\n")
    (root / "pyproject.toml").write_text('[tool.npu-migrate]\nignore = ["NPU103"]\n')
    assert sorted(codes(root)) == ["b.py:NPU101", "vendor/lib/a.py:NPU101"]
    (root / "pyproject.toml").write_text("tool = 5\n")
    assert sorted(codes(root)) == [
        f"{f}:{c}" for f in ("b.py", "vendor/lib/a.py") for c in ("NPU101", "NPU103")
    ]
    (root / "pyproject.toml").write_text("[tool]\nnpu-migrate = 5\n")
    bad = run_cli("scan", root, cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        f"error: {root / 'pyproject.toml'}: tool.npu-migrate must be a table, not an integer"
    ]


def test_a_nested_project_keeps_its_own_configuration(tmp_path: Path) -> None:
    root = project(tmp_path, {"a.py": CUDA_FILE, "sub/b.py": CUDA_FILE})
    (root / "pyproject.toml").write_text('[tool.npu-migrate]\nignore = ["NPU103"]\n')
    (root / "sub" / "pyproject.toml").write_text('[tool.npu-migrate]\nignore = ["NPU101"]\n')
    assert sorted(codes(root)) == ["a.py:NPU101", "sub/b.py:NPU103"]
    assert codes(root, "--config", str(root / "pyproject.toml")) == ["a.py:NPU101", "sub/b.py:NPU101"]


def test_a_selector_that_names_no_rule_is_refused_not_a_green_gate(tmp_path: Path) -> None:
    """A typo in a selector would select nothing (or ignore nothing) and scan would exit 0 on a
    tree full of CUDA calls: every code or prefix, from the command line or any configuration
    (nested ones included), must start some rule's code, or the run stops in one line."""
    root = project(tmp_path, {"a.py": CUDA_FILE, "sub/b.py": CUDA_FILE})
    refused = {
        (
            "--select",
            "NPU999",
        ): "--select: NPU999 is no rule's code nor the start of one; did you mean NPU969?",
        (
            "--select",
            "NPU1O1",
        ): "--select: NPU1O1 is no rule's code nor the start of one; did you mean NPU101?",
        ("--ignore", "ZZZ"): "--ignore: ZZZ is no rule's code nor the start of one; codes run from NPU101",
        ("--extend-select", "NPU941"): "it is in the opt-in rule set npu-fused-optimizers",
    }
    for args, message in refused.items():
        for command in ("scan", "apply"):
            result = run_cli(command, ".", *args, cwd=root)
            assert result.returncode == 2 and message in result.stderr, (command, args, result.stderr)
            assert len(result.stderr.strip().splitlines()) == 1
    assert (
        run_cli(
            "scan", ".", "--extend-select", "NPU941", "--rules", "npu-fused-optimizers", cwd=root
        ).returncode
        == 1
    )
    (root / "pyproject.toml").write_text('[tool.npu-migrate]\nselect = ["NPU1O1"]\n')
    result = run_cli("scan", ".", cwd=root)
    assert result.returncode == 2 and "pyproject.toml [tool.npu-migrate] select: NPU1O1" in result.stderr
    (root / "pyproject.toml").write_text("[tool.npu-migrate]\n")
    (root / "sub" / "pyproject.toml").write_text('[tool.npu-migrate.per-file-ignores]\n"b.py" = ["npu103"]\n')
    result = run_cli("scan", ".", cwd=root)
    assert result.returncode == 2 and "per-file-ignores 'b.py': npu103 is no rule's code" in result.stderr
    (root / "sub" / "pyproject.toml").write_text('[tool.npu-migrate.per-file-ignores]\n"b.py" = ["NPU103"]\n')
    assert sorted(codes(root)) == ["a.py:NPU101", "a.py:NPU103", "sub/b.py:NPU101"]


def test_the_codes_selectors_are_checked_against_are_the_catalogs() -> None:
    """Selectors are checked against the codes read cheaply from the rule files; they must be the
    codes the loaded catalog has (and the opt-in set's, where it is named)."""
    from npu_migrate.rules.files import builtin_rules_dir, opt_in_sets, rule_codes
    from npu_migrate.rules.load import load_rules

    assert rule_codes([builtin_rules_dir()]) == {rule.code for rule in load_rules()}
    opt_in = opt_in_sets()["npu-fused-optimizers"]
    assert rule_codes([opt_in]) == {rule.code for rule in load_rules([opt_in], builtin=False)}
