"""Terminal output never turns a place into an emoji: rich reads `:100:` in `file:100:5` as an
emoji code (💯) unless told not to."""

from __future__ import annotations

from tests.fixture_cases import run_cli


def test_a_finding_on_line_100_keeps_its_place(tmp_path):
    lines = ["import torch", *(f"x{i} = {i}" for i in range(2, 100)), "y = torch.randn(3).cuda()"]
    (tmp_path / "a.py").write_text("\n".join(lines) + "\n")
    ran = run_cli("scan", "a.py", cwd=tmp_path)
    assert "a.py:100:5: NPU103" in ran.stdout, ran.stdout
    assert "\N{HUNDRED POINTS SYMBOL}" not in ran.stdout + ran.stderr
