"""The command line as a user meets it: exit codes, one-line errors, in-place and dry runs,
diffs, what is skipped, user rules and the rules commands."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.fixture_cases import run_cli

CUDA_FILE = "import torch\n\nx = torch.zeros(2).cuda()  # move\ntorch.cuda.synchronize()\n"


def project(tmp_path: Path, files: dict[str, str | bytes]) -> Path:
    root = tmp_path / "proj"
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return root


def test_scan_exit_codes(tmp_path: Path) -> None:
    clean = project(tmp_path, {"a.py": "import torch\nx = torch.zeros(2)\n"})
    assert run_cli("scan", clean, cwd=tmp_path).returncode == 0
    (clean / "b.py").write_text(CUDA_FILE)
    result = run_cli("scan", clean, cwd=tmp_path)
    assert result.returncode == 1
    assert "b.py:3:5: NPU103 [safe]" in result.stdout
    assert "2 migrate automatically (100%)" in result.stdout


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    missing = run_cli("scan", "nowhere", cwd=tmp_path)
    assert missing.returncode == 2
    assert missing.stderr.strip() == "error: no such file or folder: nowhere"
    bad_rules = tmp_path / "bad.yaml"
    bad_rules.write_text("category: x\ncodes: HOU9xx\ndescription: d\nrules: [{code: HOU901}]\n")
    result = run_cli("scan", ".", "--rules", bad_rules, cwd=tmp_path)
    assert result.returncode == 2
    assert (
        result.stderr.count("\n") == 1
        and "bad.yaml: rule HOU901: field name: Field required" in result.stderr
    )
    assert "Traceback" not in result.stderr
    assert run_cli("scan", "--format", "xml", ".", cwd=tmp_path).returncode == 2


def test_apply_in_place_rewrites_only_what_needs_it(tmp_path: Path) -> None:
    root = project(tmp_path, {"a.py": CUDA_FILE, "b.py": "import torch\nprint('CUDA run')\n"})
    untouched = os.stat(root / "b.py")
    result = run_cli("apply", root, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (root / "a.py").read_text() == (
        "import torch\nimport torch_npu\n\nx = torch.zeros(2).npu()  # move\ntorch.npu.synchronize()\n"
    )
    after = os.stat(root / "b.py")
    assert (after.st_ino, after.st_mtime_ns) == (untouched.st_ino, untouched.st_mtime_ns)
    assert (tmp_path / "proj-npu-migrate-changes.csv").is_file()
    assert not list(root.glob(".*npu-migrate*")), "no temporary files left behind"


def test_dry_run_writes_nothing_and_diff_shows_the_change(tmp_path: Path) -> None:
    root = project(tmp_path, {"a.py": CUDA_FILE})
    result = run_cli("apply", root, "--dry-run", "--diff", cwd=tmp_path)
    assert (root / "a.py").read_text() == CUDA_FILE
    assert not (tmp_path / "proj-npu-migrate-changes.csv").exists()
    assert "\n-x = torch.zeros(2).cuda()  # move\n" in result.stdout
    assert "\n+x = torch.zeros(2).npu()  # move\n" in result.stdout
    assert "would rewrite 1 file(s)" in result.stderr


def test_unsafe_fixes_need_the_flag(tmp_path: Path) -> None:
    code = "import torch\ng = torch.cuda.CUDAGraph()\n"
    root = project(tmp_path, {"a.py": code})
    result = run_cli("apply", root, cwd=tmp_path)
    assert result.returncode == 1 and (root / "a.py").read_text() == code
    assert "NPU601 [unsafe]" in result.stdout
    assert run_cli("apply", root, "--unsafe", cwd=tmp_path).returncode == 0
    assert "torch.npu.NPUGraph()" in (root / "a.py").read_text()


def test_unparseable_file_is_reported_and_left_alone(tmp_path: Path) -> None:
    broken = "import torch\nx = torch.zeros(2).cuda(\n"
    root = project(tmp_path, {"bad.py": broken, "good.py": CUDA_FILE})
    result = run_cli("apply", root, cwd=tmp_path)
    assert result.returncode == 1
    assert "bad.py: line 2: cannot parse: '(' was never closed (file left untouched)" in result.stdout
    assert (root / "bad.py").read_text() == broken
    assert "torch.npu.synchronize()" in (root / "good.py").read_text()


def test_out_must_be_new_or_empty_and_outside(tmp_path: Path) -> None:
    root = project(tmp_path, {"a.py": CUDA_FILE})
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("keep")
    taken = run_cli("apply", root, "--out", tmp_path / "full", cwd=tmp_path)
    assert taken.returncode == 2 and "already exists and is not empty" in taken.stderr
    inside = run_cli("apply", root, "--out", root / "sub", cwd=tmp_path)
    assert inside.returncode == 2 and "outside" in inside.stderr
    assert (root / "a.py").read_text() == CUDA_FILE


def test_symlinks_out_of_tree_binary_and_huge_files_are_skipped(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.py"
    outside.write_text(CUDA_FILE)
    root = project(tmp_path, {"bin.py": b"x = 1\0\0cuda", "big.py": CUDA_FILE + "#" * 5000 + "\n"})
    (root / "link.py").symlink_to(outside)
    result = run_cli("apply", root, "--max-size", "4000", cwd=tmp_path)
    assert f"link.py: a link to {outside}, outside the tree" in result.stdout
    assert "bin.py: binary file" in result.stdout
    assert "big.py: larger than --max-size (4,000 bytes)" in result.stdout
    assert outside.read_text() == CUDA_FILE


def test_gitignored_files_are_not_scanned(tmp_path: Path) -> None:
    root = project(tmp_path, {".gitignore": "generated/\n", "generated/a.py": CUDA_FILE, "b.py": "x = 1\n"})
    scan = run_cli("scan", root, cwd=tmp_path)
    assert scan.returncode == 0 and "skipped 0 file(s) and 1 folder(s) matched by .gitignore" in scan.stdout


def test_user_rules_extend_the_catalog(tmp_path: Path) -> None:
    rules = {
        "category": "house",
        "codes": "HOU9xx",
        "description": "our own",
        "rules": [
            {
                "code": "HOU901",
                "name": "our-sync",
                "summary": "s",
                "why": "w",
                "message": "`{match}` is our CUDA helper",
                "applicability": "safe",
                "severity": "warning",
                "match": {"pattern": "mylib.cuda_sync($X)"},
                "fix": {"template": "mylib.npu_sync($X)", "add_import": []},
                "examples": [
                    {
                        "before": "import mylib\nmylib.cuda_sync(1)\n",
                        "after": "import mylib\nmylib.npu_sync(1)\n",
                    }
                ],
            }
        ],
    }
    (tmp_path / "house.yaml").write_text(yaml.safe_dump(rules))
    root = project(tmp_path, {"a.py": "import mylib as ml\nml.cuda_sync( dev )  # here\n"})
    assert run_cli("rules", "test", tmp_path / "house.yaml", cwd=tmp_path).returncode == 0
    result = run_cli("apply", root, "--rules", tmp_path / "house.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    assert (root / "a.py").read_text() == "import mylib as ml\nml.npu_sync(dev)  # here\n"


def test_rules_list_show_and_test(tmp_path: Path) -> None:
    listing = run_cli("rules", "list", cwd=tmp_path)
    assert "NPU101" in listing.stdout and "NPU812" in listing.stdout
    page = run_cli("rules", "show", "npu105", cwd=tmp_path)
    for heading in ("What it does", "Why", "Fix safety", "Example"):
        assert heading in page.stdout
    assert run_cli("rules", "show", "NPU999", cwd=tmp_path).returncode == 2
    from npu_migrate.rules.files import builtin_rules_dir

    tested = run_cli("rules", "test", builtin_rules_dir(), cwd=tmp_path)
    assert tested.returncode == 0 and " 0 failed" in tested.stdout


def test_json_output_is_machine_readable(tmp_path: Path) -> None:
    root = project(tmp_path, {"a.py": CUDA_FILE})
    data = json.loads(run_cli("scan", root, "--format", "json", cwd=tmp_path).stdout)
    assert [f["code"] for f in data["findings"]] == ["NPU103", "NPU101"]
    assert data["summary"]["automatic_share"] == 1.0


def test_scan_and_apply_never_import_torch_or_run_user_code(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    root = project(
        tmp_path, {"evil.py": f"open({str(marker)!r}, 'w')\nimport torch\ntorch.cuda.synchronize()\n"}
    )
    probe = (
        "import sys, runpy; sys.argv = ['npu-migrate', 'apply', sys.argv[1]]\n"
        "try:\n    runpy.run_module('npu_migrate', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, str(root)], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert not marker.exists()
    assert "torch.npu.synchronize()" in (root / "evil.py").read_text()


def test_parallel_and_serial_runs_agree(tmp_path: Path) -> None:
    root = project(tmp_path, {f"pkg{i}/m{i}.py": CUDA_FILE.replace("2", str(i)) for i in range(40)})
    serial = run_cli("scan", root, "--format", "json", "-j", "1", cwd=tmp_path)
    parallel = run_cli("scan", root, "--format", "json", "-j", "2", cwd=tmp_path)
    assert serial.stdout == parallel.stdout
    assert json.loads(serial.stdout)["summary"]["findings"] == 80


def test_each_file_once_and_scripts_by_shebang(tmp_path: Path) -> None:
    root = project(
        tmp_path, {"a.py": CUDA_FILE, "train": "#!/usr/bin/env python3\n" + CUDA_FILE, "notes.txt": "x"}
    )
    data = json.loads(
        run_cli("scan", root, root / "a.py", root / "train", "--format", "json", cwd=tmp_path).stdout
    )
    assert sorted({f["file"] for f in data["findings"]}) == [str(root / "a.py"), str(root / "train")]
    assert data["summary"]["findings"] == 4
    skipped = run_cli("scan", root / "notes.txt", cwd=tmp_path)
    assert "notes.txt: not a kind of file npu-migrate reads" in skipped.stdout


def test_a_failed_write_is_one_line_and_touches_no_source(tmp_path: Path) -> None:
    root = project(tmp_path, {"a.py": CUDA_FILE})
    result = run_cli("apply", root, "--change-list", root / "a.py" / "changes.csv", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("error: cannot write ") and result.stderr.count("\n") == 1
    assert (root / "a.py").read_text() == CUDA_FILE
    typo = run_cli("apply", root, "--change-list", tmp_path / "reports" / "changes.csv", cwd=tmp_path)
    assert typo.returncode == 2 and typo.stderr.endswith("changes.csv: its folder does not exist\n")
    assert not (tmp_path / "reports").exists()


def test_help_texts_keep_their_defaults(tmp_path: Path) -> None:
    """Rich reads [...] as markup: defaults written in brackets would silently vanish."""
    for command, text in (
        ("verify", "default: cuda if present"),
        ("run", "default: emulate when"),
        ("scan", "one per CPU"),
        ("scan", "A pyproject.toml with [tool.npu-migrate], or a TOML file"),
    ):
        page = run_cli(command, "--help", cwd=tmp_path).stdout
        assert text in " ".join(page.replace("│", " ").split()), command


def test_every_option_says_what_it_does() -> None:
    import typer.core
    import typer.main

    from npu_migrate.cli import app

    def commands(group: Any, prefix: str = "") -> list[tuple[str, Any]]:
        found = [(prefix, group)]
        for name, child in getattr(group, "commands", {}).items():
            found += commands(child, f"{prefix} {name}")
        return found

    silent = [
        f"{name} {option.opts[0]}"
        for name, command in commands(typer.main.get_command(app))
        for option in command.params
        if isinstance(option, typer.core.TyperOption) and not option.hidden and not option.help
    ]
    assert silent == []


def test_findings_after_apply_point_at_the_rewritten_files_lines(tmp_path: Path) -> None:
    code = "import torch\n\nx = torch.zeros(2).cuda()\nmajor = torch.cuda.get_device_capability()\n"
    root = project(tmp_path, {"a.py": code})
    in_place = run_cli("apply", root, cwd=tmp_path)
    lines = (root / "a.py").read_text().splitlines()
    assert lines[1] == "import torch_npu"  # everything below moved down one line
    line = int(re.search(r"a\.py:(\d+):\d+: NPU106", in_place.stdout).group(1))
    assert "get_device_capability" in lines[line - 1]
    records = json.loads((tmp_path / "proj-npu-migrate-changes.json").read_text())
    rows = {r["Rule"]: r for r in records if "Rule" in r}
    assert "npu()" in lines[int(rows["NPU103"]["Start Line"]) - 1]
    source = project(tmp_path / "other", {"a.py": code})
    copied = run_cli("apply", source, "--out", tmp_path / "copy", cwd=tmp_path)
    assert f"{tmp_path / 'copy' / 'a.py'}:5:9: NPU106" in copied.stdout.replace("\n", "")


def test_relative_imports_resolve_through_the_package_and_the_cache_knows_it(tmp_path: Path) -> None:
    """The same bytes mean CUDA inside a package named transformers and nothing inside another,
    on a cold run and from the result cache alike."""
    use = "from ..utils import is_torch_cuda_available\n\nok = is_torch_cuda_available()\n"
    files = {
        f"{top}/{name}": ""
        for top in ("transformers", "mylib")
        for name in ("__init__.py", "sub/__init__.py")
    }
    root = project(tmp_path, {**files, "transformers/sub/use.py": use, "mylib/sub/use.py": use})
    for _ in range(2):  # cold, then warm (the tests' private result cache)
        result = run_cli("scan", root, cwd=tmp_path)
        assert result.returncode == 1, result.stderr
        assert "transformers/sub/use.py:3:6: NPU114 [safe]" in result.stdout
        assert "mylib" not in result.stdout
