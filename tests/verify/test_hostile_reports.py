"""verify's reports attacked with the project's own names: test ids and module names are text,
never markup (rich's `[...]` in the terminal) nor mathtext (matplotlib's `$...$` in a plot)."""

from __future__ import annotations

from pathlib import Path

from tests.fixture_cases import run_cli

from .test_verify_tests import BAD_RULE, PROJECT


def test_test_ids_with_markup_are_printed_as_they_are(tmp_path: Path) -> None:
    """`[/data/train]` in a test id ended the report with rich's MarkupError (a closing tag
    that closes nothing); `[bold]` turned the rest bold."""
    root = tmp_path / "proj"
    for name, text in PROJECT.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "tests" / "test_paths.py").write_text(
        "import pytest\n\nfrom lib import empty\n\n\n"
        '@pytest.mark.parametrize("where", ["[/data/train]", "[bold]x", "$\\\\euro$"])\n'
        "def test_empty(where):\n    assert empty(3).sum() == 0\n"
    )
    rules = tmp_path / "bad.yaml"
    rules.write_text(BAD_RULE)
    html = tmp_path / "r.html"
    result = run_cli(
        "verify", root, "--tests", "pytest -q tests", "--rules", rules, "--html", html, "--no-bisect",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    ids = (
        "test_empty[[/data/train]]",
        "test_empty[[bold]x]",
        "test_empty[$\\\\euro$]",
    )  # pytest doubles a \\
    for test_id in ids:
        assert f"tests/test_paths.py::{test_id}: failed" in result.stdout, result.stdout
    assert "test_empty[[/data/train]]" in html.read_text()


def test_module_names_with_dollars_are_names_in_the_html_plots(tmp_path: Path) -> None:
    """A module named `$\\euro$` (a ModuleDict's key) ended the HTML report in matplotlib's
    mathtext ParseException."""
    for side in ("original", "migrated"):
        (tmp_path / side).mkdir()
        (tmp_path / side / "entry.py").write_text(
            "import torch\n\n\ndef build():\n    torch.manual_seed(0)\n"
            "    model = torch.nn.ModuleDict(\n"
            '        {"$\\\\euro$": torch.nn.Linear(4, 4), "$x^": torch.nn.Linear(4, 4)}\n    )\n\n'
            "    class Net(torch.nn.Module):\n        def __init__(self):\n            super().__init__()\n"
            "            self.parts = model\n\n"
            "        def forward(self, x):\n"
            "            return self.parts['$x^'](self.parts['$\\\\euro$'](x))\n\n"
            '    return {"model": Net().eval(), "inputs": (torch.ones(2, 4),)}\n'
        )
    html = tmp_path / "r.html"
    result = run_cli(
        "verify", "--original", tmp_path / "original", "--migrated", tmp_path / "migrated",
        "--entry", "entry.py:build", "--html", html, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "parts.$\\euro$" in html.read_text()
