"""The partial tree (engine.partial_tree): the stdlib parser reads only the top-level
statements a scan needs, and what it reads is exactly what a whole parse gives; a column-0 line
that starts no statement never yields a wrong tree."""

from __future__ import annotations

import ast
import tokenize
from pathlib import Path

import pytest

from npu_migrate.engine.names import ImportTable
from npu_migrate.engine.partial_tree import PartialTree, top_level_pieces, tree_around
from npu_migrate.engine.regions import split_lines
from npu_migrate.engine.source import stdlib_parse
from npu_migrate.model import ModulePath

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

# A timm-like model file: imports, a helper, the model class with its CUDA line, a registry.
MODEL = '''"""A model."""
import torch
from torch import nn

__all__ = ["Net"]


@register_notrace_function
def _helper(x):
    return x * 2


# The model.
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(
            4, 4,
        )

    def forward(self, x):
        return self.fc(x).cuda()


def _create(variant, **kwargs):
    from functools import partial
    return partial(Net, **kwargs)


class Other:
    pass


if __name__ == "__main__":
    Net()
else:
    pass
'''


def _lines(text: str) -> list[str]:
    return split_lines(text)


def _partial(text: str, wanted: list[int]) -> PartialTree | None:
    return tree_around(_lines(text), wanted, stdlib_parse)


def test_a_model_file_is_read_around_the_wanted_line_and_elsewhere_stubs() -> None:
    line = MODEL.splitlines().index("        return self.fc(x).cuda()") + 1
    partial = _partial(MODEL, [line])
    assert partial is not None
    whole = ast.parse(MODEL)
    kinds = [(type(s).__name__, getattr(s, "name", None)) for s in partial.tree.body]
    assert kinds == [(type(s).__name__, getattr(s, "name", None)) for s in whole.body]
    by_name = {getattr(s, "name", ""): s for s in partial.tree.body}
    # Read: the class with the line, the function that imports; a stub: the others, their lines kept.
    assert ast.dump(by_name["Net"]) == ast.dump(
        next(s for s in whole.body if getattr(s, "name", "") == "Net")
    )
    assert any(isinstance(n, ast.ImportFrom) for n in ast.walk(by_name["_create"]))
    for name in ("_helper", "Other"):
        stub, real = by_name[name], next(s for s in whole.body if getattr(s, "name", "") == name)
        assert [type(n).__name__ for n in stub.body] == ["Pass"]  # type: ignore[attr-defined]
        first = min([real.lineno, *(d.lineno for d in real.decorator_list)])  # type: ignore[attr-defined]
        assert (stub.lineno, stub.end_lineno) == (first, real.end_lineno)
    # Every statement that is not a definition is read, with its lines as the whole parse has them.
    plain = [ast.dump(s, include_attributes=True) for s in partial.tree.body if not hasattr(s, "name")]
    assert plain == [ast.dump(s, include_attributes=True) for s in whole.body if not hasattr(s, "name")]
    assert ImportTable.of_ast(partial.tree, ModulePath("timm.models.net")).bound == (
        ImportTable.of_ast(whole, ModulePath("timm.models.net")).bound
    )
    assert partial.covers(line - 5, line) and not partial.covers(1, len(MODEL.splitlines()))


def test_pieces_join_decorators_clauses_and_closing_brackets() -> None:
    pieces = top_level_pieces(_lines(MODEL))
    assert pieces is not None
    lines = MODEL.splitlines()
    heads = [lines[p.line - 1] for p in pieces]
    assert "@register_notrace_function" in heads and "def _helper(x):" not in heads
    assert "else:" not in heads and 'if __name__ == "__main__":' in heads
    # Comment and blank lines above a statement start its piece; its end is its last line of code.
    net = next(p for p in pieces if p.name == "Net")
    assert lines[net.start - 1] == "" and lines[net.line - 1] == "class Net(nn.Module):"
    assert lines[net.end - 1] == "        return self.fc(x).cuda()"


G = "\n\ndef g():\n    return torch.cuda.device_count()\n"  # the wanted function, last


@pytest.mark.parametrize(
    ("text", "read_whole"),
    [
        # A column-0 line inside a docstring that spells a definition: f's quotes do not pair up.
        ('import torch\n\ndef f():\n    """Use it so:\n\nclass Fake:\n    pass\n"""\n    return 1' + G, True),
        # A column-0 line inside brackets: f's brackets do not pair up, so f is read, with what
        # follows it (a statement, as the text shows it) in the same piece of code: it parses.
        ("import torch\n\ndef f():\n    return [\n1, 2,\n    ]" + G, False),
        # A backslash continuation onto column 0: f ends in a backslash, read so too.
        ("import torch\n\ndef f():\n    x = 1 + \\\n2\n    return x" + G, False),
        # A triple quote in a comment pairs up with a string's: f is left out, the string's
        # column-0 `def h():` too, and the string's end starts a statement that does not parse.
        (
            'import torch\n\ndef f():\n    # a """ in a comment\n    s = """\ndef h():\n"""\n    return s'
            + G,
            True,
        ),
        # A column-0 string line in a statement, not in a definition: read whole with it.
        ('import torch\nS = """\nx = 1\n"""' + G, False),
    ],
    ids=["docstring", "brackets", "backslash", "quote in a comment", "statement"],
)
def test_a_column_0_line_inside_a_definition_never_yields_a_wrong_tree(text: str, read_whole: bool) -> None:
    wanted = [text.splitlines().index("    return torch.cuda.device_count()") + 1]
    partial = _partial(text, wanted)
    whole = ast.parse(text)
    assert (partial is None) is read_whole
    if partial is not None:
        assert [ast.dump(s) for s in partial.tree.body] == [ast.dump(s) for s in whole.body]


def test_a_piece_that_does_not_parse_alone_means_the_whole_file() -> None:
    """A string holding a column-0 definition: the function before it is read (its triple
    quotes do not pair up) and does not parse alone."""
    text = 'import torch\ndef f():\n    s = """\ndef fake():\n    pass\n"""\n    return 1\n'
    assert _partial(text, [1]) is None


def test_a_file_ending_inside_a_decorator_is_not_split() -> None:
    assert top_level_pieces(_lines("import torch\n@torch.jit.script\n")) is None


@pytest.mark.parametrize("path", sorted(FIXTURES.rglob("*.py")), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_fixture_reads_the_same_as_a_whole_parse(path: Path) -> None:
    """Wanting each top-level definition in turn, what is read equals the whole parse's."""
    try:
        with tokenize.open(path) as file:
            text = file.read()
        whole = ast.parse(text)
    except (SyntaxError, UnicodeDecodeError):
        pytest.skip("a fixture that does not parse")
    for statement in whole.body:
        if not isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        partial = _partial(text, [statement.lineno])
        assert partial is not None
        assert len(partial.tree.body) == len(whole.body)
        for got, real in zip(partial.tree.body, whole.body, strict=True):
            if got.end_lineno != real.end_lineno or type(got) is not type(real):
                pytest.fail(f"line {real.lineno}: {ast.dump(got)[:80]} for {ast.dump(real)[:80]}")
            if partial.covers(got.lineno, got.end_lineno or got.lineno):
                assert ast.dump(got, include_attributes=True) == ast.dump(real, include_attributes=True)
