"""`run --emulate` says what the guarded fused swaps did: per guarded site, how often the fused
operator ran and why the original ran instead, summed over every process the run starts (a
script run in this process, or torchrun's workers); nothing when no guard was asked. The
stand-in's sitecustomize, which counts in the started processes, still runs the interpreter's
own sitecustomize it hides."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.fixture_cases import run_cli

pytest.importorskip("torch")

ATTENTION = """import torch.nn.functional as F


def attend(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
"""

MAIN = """import os

import torch

from attention import attend

cases = [((1, 2, 8, 16), torch.float32)] * 2 + [((1, 3, 2, 8, 16), torch.float32)]  # windows: 5-D
if os.environ.get("RANK", "0") == "0":
    cases.append(((1, 2, 8, 16), torch.float64))
for shape, dtype in cases:
    q = torch.randn(shape, dtype=dtype)
    out = attend(q.to("npu"), q.to("npu"), q.to("npu"))
    want = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    torch.testing.assert_close(out.cpu(), want, rtol=1e-4, atol=1e-4)
print("ok")
"""


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("guards") / "src"
    source.mkdir()
    (source / "attention.py").write_text(ATTENTION)
    (source / "main.py").write_text(MAIN)
    out = source.parent / "migrated"
    applied = run_cli("apply", source, "--unsafe", "--out", out, "--no-change-list", cwd=source.parent)
    assert "why_not_npu_fusion_attention(q, k, v" in (out / "attention.py").read_text(), applied.stdout
    return out


def reported(stderr: str) -> list[str]:
    """The lines under the guard report's heading."""
    heading = "npu-migrate: guarded fused swaps (fused: the NPU operator ran):\n"
    assert heading in stderr, stderr[-3000:]
    return re.findall(r"^  (.+)$", stderr.split(heading, 1)[1], re.M)


def test_a_script_run_here_reports_each_site_with_its_fallback_reasons(migrated: Path) -> None:
    ran = run_cli("run", "--emulate", "main.py", cwd=migrated)
    assert ran.returncode == 0 and ran.stdout.strip() == "ok", ran.stderr[-3000:]
    lines = (migrated / "attention.py").read_text().splitlines()
    line = next(n for n, text in enumerate(lines, 1) if "why_not_npu_fusion_attention(q, k" in text)
    assert reported(ran.stderr) == [
        f"attention.py:{line}: fused 2; the original 1 (5-D, not 4-D (B, N, S, D)); "
        "the original 1 (torch.float64, not float16, bfloat16 or float32)"
    ]


def test_torchrun_workers_are_summed(migrated: Path) -> None:
    ran = run_cli("run", "--emulate", "torchrun", "--nproc_per_node=2", "main.py", cwd=migrated)
    assert ran.returncode == 0, ran.stderr[-3000:]
    (line,) = reported(ran.stderr)
    assert re.fullmatch(
        r"attention\.py:\d+: fused 4; the original 2 \(5-D, not 4-D \(B, N, S, D\)\); "
        r"the original 1 \(torch\.float64, not float16, bfloat16 or float32\)",
        line,
    ), line


def test_no_report_without_guards_and_the_hidden_sitecustomize_still_runs(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "sitecustomize.py").write_text(  # in npu-migrate's own process too: PYTHONPATH is its
        "import os\nprint('hidden one ran; counting:', 'NPU_MIGRATE_GUARD_COUNTS' in os.environ)\n"
    )
    (tmp_path / "child.py").write_text("import torch\nprint(torch.ones(2, device='npu').sum().item())\n")
    ran = run_cli("run", "--emulate", "python", "child.py", cwd=tmp_path, env={"PYTHONPATH": str(hidden)})
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.splitlines() == [
        "hidden one ran; counting: False",
        "hidden one ran; counting: True",
        "2.0",
    ], ran.stdout
    assert "guarded fused swaps" not in ran.stderr
