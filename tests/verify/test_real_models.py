"""Real models, from their published sources, migrated by `verify TREE --unsafe` and held to the
tight rule on the emulation; a bug planted in one's migrated copy is found where it was planted.
The sources are fetched once (tests/sources.py); their imports come with the dev extra."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import sources
from tests.fixture_cases import run_cli
from tests.sources import Release

pytest.importorskip("torch")

ENTRIES = Path(__file__).resolve().parents[1] / "real_models" / "entries"


@dataclass(frozen=True)
class RealModel:
    release: Release
    entry: str  # a file in tests/real_models/entries
    args: tuple[str, ...]  # more verify options
    rules: tuple[str, ...]  # rules whose changes the model's code path runs through


MODELS = {
    "llama3-reference": RealModel(sources.LLAMA_MODELS, "llama3_reference.py", (), ("NPU905", "NPU978")),
    "x-transformers": RealModel(sources.X_TRANSFORMERS, "x_transformers_decoder.py", ("--steps", "2"), ()),
    "litgpt": RealModel(sources.LITGPT, "litgpt_llama.py", ("--steps", "2"), ()),
    "dit": RealModel(sources.DIFFUSERS, "diffusers_dit.py", (), ()),
}


def real_tree(model: RealModel, root: Path) -> Path:
    """The package as published, with the entry beside it: a tree for `verify TREE`."""
    package = sources.fetch(model.release)
    tree = root / "tree"
    shutil.copytree(package, tree / package.name)
    shutil.copy(ENTRIES / model.entry, tree / "entry.py")
    return tree


def verify(tmp_path: Path, *args: str | Path) -> tuple[int, dict, str]:
    report = tmp_path / "report.json"
    result = run_cli("verify", *args, "--entry", "entry.py:build", "--json", report, cwd=tmp_path)
    data = json.loads(report.read_text()) if report.exists() else {}
    return result.returncode, data, result.stdout + result.stderr


@pytest.mark.parametrize("name", list(MODELS))
def test_a_real_model_passes_on_its_migrated_copy(name: str, tmp_path: Path) -> None:
    model = MODELS[name]
    code, data, output = verify(tmp_path, real_tree(model, tmp_path), "--unsafe", *model.args)
    assert code == 0, output
    assert data["passed"] and data["migrated"]["emulated"] and not data["problems"]
    assert data["rule"].startswith("tight (cpu vs cpu)")
    assert len(data["rows"]) >= 20 and all(row["passed"] for row in data["rows"])
    assert all(step["passed"] for step in data["steps"])
    assert len(data["steps"]) == (2 if "--steps" in model.args else 0)
    migrated = next(line for line in output.splitlines() if line.startswith("verify: migrated a copy"))
    for code in model.rules:
        assert f"{code} x" in migrated, migrated


def test_a_bug_planted_in_a_real_model_is_found_where_it_was_planted(tmp_path: Path) -> None:
    """The Llama 3 reference's SwiGLU scaled by 1% in its migrated copy: cosine stays 0.9999+."""
    tree = real_tree(MODELS["llama3-reference"], tmp_path)
    migrated = tmp_path / "migrated"
    applied = run_cli("apply", tree, "--unsafe", "--out", migrated, cwd=tmp_path)
    assert applied.returncode in (0, 1), applied.stderr
    model_file = migrated / "llama_models" / "llama3" / "model.py"
    swiglu = "return self.w2(F.silu(self.w1(x)) * self.w3(x))"
    assert swiglu in model_file.read_text()
    model_file.write_text(model_file.read_text().replace(swiglu, swiglu[:-1] + " * 1.01)"))
    code, data, output = verify(tmp_path, "--original", tree, "--migrated", migrated)
    assert code == 1, output
    assert data["first_divergence"] == "layers.0.feed_forward", output
