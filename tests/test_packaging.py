"""The rules ship inside the wheel: a plain (non-editable) install must find them."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.conftest import ROOT


def test_a_built_wheel_carries_and_finds_the_rules(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            tmp_path,
            ROOT,
        ],
        check=True,
        capture_output=True,
    )
    [wheel] = tmp_path.glob("npu_migrate-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {n.removeprefix("npu_migrate/_rules/") for n in names if n.startswith("npu_migrate/_rules/")}
    assert shipped == {p.relative_to(ROOT / "rules").as_posix() for p in (ROOT / "rules").rglob("*.yaml")}
    assert "opt-in/npu-fused-optimizers.yaml" in shipped
    assert "npu_migrate/rule-schema.json" in names
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", target, wheel],
        check=True,
        capture_output=True,
    )
    probe = (
        "from npu_migrate.rules.files import builtin_rules_dir, opt_in_sets\n"
        "from npu_migrate.rules.load import load_rules\n"
        "print(builtin_rules_dir()); print(len(load_rules())); print(*opt_in_sets())"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    )
    where, count, *sets = result.stdout.split()
    assert sets == ["npu-fused-optimizers"]  # `--rules npu-fused-optimizers` works installed
    assert Path(where) == target / "npu_migrate" / "_rules"
    from npu_migrate.rules.load import load_rules

    assert int(count) == len(load_rules())


def test_the_layers_import_downwards_only() -> None:
    """The engine, its match kinds and the handlers import nothing from `rules/` (the rule schema
    is assembled from the kinds, never the other way round), and scanning imports no torch."""
    code = (
        "import sys\n"
        "import npu_migrate.engine.source, npu_migrate.engine.kinds, npu_migrate.pipeline\n"
        "from npu_migrate.pipeline import HANDLERS, handler\n"
        "for kind in HANDLERS: handler(kind)\n"
        "print(sorted(m for m in sys.modules if m.startswith(('npu_migrate.rules', 'torch'))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert result.stdout.strip() == "[]"
