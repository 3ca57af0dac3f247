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


_WITHOUT_TORCH = """
import sys
from importlib.abc import MetaPathFinder


class NoTorch(MetaPathFinder):  # an environment where torch was never installed
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoTorch())
from npu_migrate.cli import main

sys.argv = ["npu-migrate", *sys.argv[1:]]
main()
"""


def test_each_command_that_runs_on_torch_says_which_extra_in_one_line_without_it(tmp_path: Path) -> None:
    """`run --emulate` without torch ended in the stand-in torch_npu's traceback from the script's
    process; now it says, as verify does, which extra to install, before anything runs."""
    (tmp_path / "train.py").write_text("import torch_npu\n")
    for command in (["run", "--emulate", "train.py"], ["verify", ".", "--entry", "train.py:build"]):
        done = subprocess.run(
            [sys.executable, "-c", _WITHOUT_TORCH, *command], cwd=tmp_path, capture_output=True, text=True,
            check=False,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        named = "run --emulate" if command[0] == "run" else "verify"
        assert done.stderr.splitlines() == [
            f"error: {named} needs torch (torch is missing): "
            "install the verify extra, `pip install '.[verify]'` in npu-migrate's checkout"
        ]
