"""engine.positions hooks libcst's unpublished code generation: it must give exactly what the
public PositionProvider gives, for every node of real files and for any subset asked for.
This is the test that fails when a libcst upgrade moves the hooks."""

from __future__ import annotations

import random
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import PositionProvider

from npu_migrate.engine.positions import positions

from .conftest import FIXTURES, ROOT

FILES = sorted(
    [p for p in FIXTURES.glob("*/src/**/*.py") if p.name != "broken.py"]
    + list((ROOT / "npu_migrate" / "engine").glob("*.py"))
)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_positions_agree_with_position_provider(path: Path) -> None:
    module = cst.parse_module(path.read_bytes())
    expected = cst.MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    assert positions(module, list(expected)) == dict(expected)
    random.seed(path.name)
    expressions = [n for n in expected if isinstance(n, cst.BaseExpression)]
    some = random.sample(expressions, min(25, len(expressions)))
    assert positions(module, some) == {n: expected[n] for n in some}
    statements = [n for n in expected if isinstance(n, cst.BaseStatement | cst.BaseSmallStatement)]
    some = random.sample(statements, min(10, len(statements)))
    assert positions(module, some) == {n: expected[n] for n in some}
