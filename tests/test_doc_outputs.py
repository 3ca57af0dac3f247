"""The output README.md and docs/ show is what their commands print now: tests/doc_outputs.py's
scenes run once, on the bundled fixtures in a temporary checkout."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import doc_outputs
from tests.fixture_cases import ROOT

FENCED = re.compile(r"(?:(<!-- [^>]+ -->)\n)?```\w*\n(.*?)^```$", re.M | re.S)


@pytest.fixture(scope="module")
def bodies() -> dict[str, str]:
    pytest.importorskip("torch")  # run --emulate and verify
    return doc_outputs.render(doc_outputs.SCENES)


def test_every_page_shows_what_its_commands_print_now(bodies: dict[str, str]) -> None:
    assert doc_outputs.stale_pages(bodies) == [], "run: python -m tests.doc_outputs"


def test_a_page_whose_shown_output_changed_is_stale(bodies: dict[str, str], tmp_path: Path) -> None:
    page = tmp_path / "README.md"
    shown = (ROOT / "README.md").read_text()
    assert "exit 1: apply would change 3 file(s) (--diff)" in shown
    page.write_text(shown.replace("exit 1: apply would change 3", "exit 0: apply would change 3"))
    assert doc_outputs.stale_pages(bodies, [page]) == ["README.md"]


def test_every_command_a_page_shows_with_its_output_is_regenerated_or_says_why_not() -> None:
    marked: list[str] = []
    for page in doc_outputs.PAGES:
        for comment, body in FENCED.findall(page.read_text()):
            if comment.startswith("<!-- output: "):
                marked.append(comment.removeprefix("<!-- output: ").removesuffix(" -->"))
            elif re.search(r"^\$ npu-migrate ", body, re.M):
                assert comment.startswith("<!-- not regenerated: "), f"{page.name}: {body.splitlines()[0]}"
    assert sorted(marked) == sorted(doc_outputs.SCENES), "each scene shown once"


def test_the_demo_that_runs_is_the_readme_one_liner() -> None:
    assert doc_outputs.DEMO_SETUP + doc_outputs.DEMO in (ROOT / "README.md").read_text()
