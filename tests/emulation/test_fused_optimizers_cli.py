"""The fused-optimizer rewrite on the cases that broke torch_npu's own fused optimizers in real
projects, end to end through the CLI: `apply --unsafe` writes torch's `fused=True`, and the
migrated training, run on the emulated NPU (`run --emulate`), ends with the weights the original
reaches on the CPU: with `zero_grad(set_to_none=True)` in another file, an accelerate-style
wrapper, parameters left on the CPU, a gradient set to None and bf16 parameters. The opt-in
NpuFused* rewrite is held where the program shows what it cannot take."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixture_cases import run_cli
from tests.sources import torch_npu_sources

torch = pytest.importorskip("torch")

from npu_migrate.emulation.tensors import FUSED_OPTIMIZERS  # noqa: E402

PROJECT = Path(__file__).parents[2] / "fixtures" / "fused_optimizers"
CASES = ["plain", "cpu", "bf16", "wrapped", "grad_none"]


def test_fused_true_trains_like_the_original_on_the_emulated_npu(tmp_path: Path) -> None:
    original, migrated = tmp_path / "original", tmp_path / "migrated"
    shutil.copytree(PROJECT, original)
    shutil.copytree(PROJECT, migrated)
    applied = run_cli("apply", "--unsafe", ".", "--no-change-list", cwd=migrated)
    assert applied.returncode in (0, 1), applied.stdout + applied.stderr
    assert (
        "torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1, fused=True)"
        in (migrated / "train.py").read_text()
    )
    assert (migrated / "loop.py").read_bytes() == (PROJECT / "loop.py").read_bytes()
    for tree, command in (
        (original, [sys.executable, "train.py"]),
        (migrated, [sys.executable, "-m", "npu_migrate", "run", "--emulate", "train.py"]),
    ):
        (tree / "out").mkdir()
        ran = subprocess.run([*command, "out", *CASES], cwd=tree, capture_output=True, text=True, check=False)
        assert ran.returncode == 0, ran.stdout + ran.stderr
    for case in CASES:
        before, after = (torch.load(tree / "out" / f"{case}.pt") for tree in (original, migrated))
        tolerance = {"rtol": 1.6e-2, "atol": 2e-2} if case == "bf16" else {"rtol": 1e-5, "atol": 1e-6}
        for name, weight in before.items():  # bf16: the fused kernel updates in fp32, then rounds
            torch.testing.assert_close(after[name], weight, **tolerance, msg=f"{case}: {name}")


def test_the_npu_fused_optimizers_are_held_where_another_file_sets_gradients_to_none(tmp_path: Path) -> None:
    """NpuFusedAdamW raises on zero_grad(set_to_none=True): the trainer calling it is another
    file of the run, which the hold reads (it used to look at the optimizer's file only)."""
    (tmp_path / "model.py").write_text(
        "import torch\nmodel = torch.nn.Linear(4, 4).cuda()\n"
        "optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)\n"
    )
    (tmp_path / "trainer.py").write_text("def step(optimizer):\n    optimizer.zero_grad(set_to_none=True)\n")
    scanned = run_cli("scan", ".", "--rules", "npu-fused-optimizers", cwd=tmp_path)
    assert "NPU941 [held]" in scanned.stdout, scanned.stdout + scanned.stderr
    assert "trainer.py mentions set_to_none" in scanned.stdout
    (tmp_path / "trainer.py").write_text("def step(optimizer):\n    optimizer.zero_grad()\n")
    applied = run_cli(
        "apply", ".", "--unsafe", "--rules", "npu-fused-optimizers", "--no-change-list", cwd=tmp_path
    )
    assert applied.returncode in (0, 1), applied.stdout + applied.stderr
    assert "torch_npu.optim.NpuFusedAdamW(model.parameters(), lr=1e-3)" in (tmp_path / "model.py").read_text()


def test_an_unknown_rule_set_is_a_one_line_error(tmp_path: Path) -> None:
    result = run_cli("scan", ".", "--rules", "npu-fused-optimiser", cwd=tmp_path)
    assert result.returncode == 2
    assert "nor an opt-in rule set (npu-fused-optimizers)" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_emulated_fused_kernels_are_those_torch_npu_registers() -> None:
    """What the emulation lets `fused=True` run on the NPU and what it refuses, read against the
    real torch_npu's registrations (its csrc/aten/npu_native_functions_by_codegen.yaml)."""
    listed = (torch_npu_sources() / "csrc" / "aten" / "npu_native_functions_by_codegen.yaml").read_text()
    registered = set(re.findall(r"func: (_fused_\w+_(?:\.tensor_lr)?)\(", listed))
    assert {name for name in registered if "." not in name} >= FUSED_OPTIMIZERS
    assert "_fused_adam_.tensor_lr" in registered and "_fused_sgd_.tensor_lr" in registered
    assert "_fused_adamw_.tensor_lr" not in registered  # what the emulation refuses


def test_the_emulation_refuses_what_the_npu_kernels_do_not_take() -> None:
    script = (
        "import torch\nfrom npu_migrate import emulation\nemulation.activate()\n"
        "def step(cls, dtype=torch.float32, **kw):\n"
        "    m = torch.nn.Linear(4, 3).to(dtype).npu()\n"
        "    o = cls(m.parameters(), fused=True, **kw)\n"
        "    m(torch.randn(2, 4).to(dtype).npu()).sum().backward()\n"
        "    try:\n        o.step()\n        return 'ok'\n"
        "    except Exception as e:\n        return type(e).__name__\n"
        "lr = torch.tensor(0.01)\n"
        "print(step(torch.optim.AdamW, lr=lr), step(torch.optim.Adam, lr=lr),\n"
        "      step(torch.optim.SGD, torch.float64, lr=0.1), step(torch.optim.AdamW, torch.bfloat16))\n"
    )
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["NotImplementedError", "ok", "RuntimeError", "ok"]


ATTENTION = Path(__file__).parents[2] / "fixtures" / "eager_attention"


def test_eager_attention_fused_over_statements_trains_like_the_original(tmp_path: Path) -> None:
    """`apply --unsafe` fuses timm's ConViT attention (four statements) into npu_fusion_attention
    under its run-time guard (the statements kept for the `else`), holds DINO's (its attention
    map is returned), and the migrated training run on the emulated NPU ends with the original's
    weights."""
    original, migrated = tmp_path / "original", tmp_path / "migrated"
    shutil.copytree(ATTENTION, original)
    shutil.copytree(ATTENTION, migrated)
    scanned = run_cli("scan", ".", cwd=migrated)
    assert "is read after it (`return self.proj(x), attn`)" in scanned.stdout, scanned.stdout
    applied = run_cli("apply", "--unsafe", ".", "--no-change-list", cwd=migrated)
    assert applied.returncode in (0, 1), applied.stdout + applied.stderr
    fused = (migrated / "vit.py").read_text()
    assert fused.count("torch_npu.npu_fusion_attention(q, k, v, q.shape[1]") == 1, fused
    assert "if why_not_npu_fusion_attention(q, k, v, scale=self.scale) is None:" in fused, fused
    assert fused.count("softmax") == 2, "the held attention keeps its softmax, the fused one its else"
    assert 'device = "npu" if torch.npu.is_available()' in (migrated / "train.py").read_text()
    for tree, command in (
        (original, [sys.executable, "train.py"]),
        (migrated, [sys.executable, "-m", "npu_migrate", "run", "--emulate", "train.py"]),
    ):
        (tree / "out").mkdir()
        ran = subprocess.run([*command, "out"], cwd=tree, capture_output=True, text=True, check=False)
        assert ran.returncode == 0, ran.stdout + ran.stderr
    before, after = (torch.load(tree / "out" / "weights.pt") for tree in (original, migrated))
    for name, weight in before.items():
        torch.testing.assert_close(after[name], weight, rtol=1e-5, atol=1e-6, msg=name)
