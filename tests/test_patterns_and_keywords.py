"""Match and fix kinds that the built-in catalog uses little: code patterns with
metavariables, templates, and keyword edits (set, rename, drop)."""

from __future__ import annotations

import libcst as cst
import pytest

from npu_migrate.engine.index import RuleIndex
from npu_migrate.engine.names import ImportTable
from npu_migrate.engine.patterns import Pattern
from npu_migrate.engine.source import migrate_source
from npu_migrate.model import Applicability
from npu_migrate.rules.schema import Rule

SAFE = frozenset({Applicability.safe})


def match(pattern: str, code: str) -> dict[str, str] | None:
    module = cst.parse_module(code)
    table = ImportTable.of(module)
    node = module.body[-1].body[0]  # the last simple statement
    target = node.value if isinstance(node, cst.Expr) else node
    found = Pattern.compile(pattern).match(target, table.qualify)
    return None if found is None else {k: module.code_for_node(v) for k, v in found.items()}


def test_patterns_resolve_names_ignore_layout_and_bind_metavariables() -> None:
    aliased = "import torch as th\nth.cuda.nvtx.mark(  'a' )\n"
    assert match("torch.cuda.nvtx.mark($M)", aliased) == {"M": "'a'"}
    assert match("F.silu($A) * $B", "import torch.nn.functional as F\n(F.silu(x)) * y\n") is None
    assert match("torch.nn.functional.silu($A) * $B", "import torch.nn.functional as F\nF.silu(x) * y\n") == {
        "A": "x",
        "B": "y",
    }
    assert match("$X + $X", "a + a\n") == {"X": "a"}
    assert match("$X + $X", "a + b\n") is None
    assert match("f($X, k=1)", "f(z, k=2)\n") is None
    assert match("x.device.type == 'cuda'", 'x.device.type == "cuda"\n') == {}


def rule(**fields) -> Rule:
    base = {
        "code": "HOU901",
        "name": "t",
        "summary": "s",
        "why": "w",
        "message": "m",
        "applicability": "safe",
        "severity": "warning",
        "examples": [{"flagged": "x"}],
    }
    return Rule.model_validate({**base, **fields})


def apply(one: Rule, code: str) -> str:
    result = migrate_source(code.encode(), RuleIndex([one]), SAFE)
    return (result.new_source or code.encode()).decode()


def test_templates_keep_what_metavariables_matched_and_spell_names_through_imports() -> None:
    swap = rule(
        match={"pattern": "torch.cuda.nvtx.mark($MSG)"},
        fix={"template": "torch.npu.mstx.mark($MSG)"},
        examples=[{"before": "a", "after": "b"}],
    )
    code = "import torch as th\nth.cuda.nvtx.mark(f'step {i}'  )  # marker\n"
    expected = "import torch as th\nimport torch_npu\nth.npu.mstx.mark(f'step {i}')  # marker\n"
    assert apply(swap, code) == expected


def test_keyword_edits_set_rename_and_drop() -> None:
    edit = rule(
        match={"call": ["torch.optim.AdamW"]},
        fix={
            "keywords": {"set": {"eps": "1e-8"}, "rename": {"decay": "weight_decay"}, "drop": ["foreach"]},
            "add_import": [],
        },
        examples=[{"before": "a", "after": "b"}],
    )
    code = "from torch.optim import AdamW\nopt = AdamW(params, lr=1e-3, foreach=True, decay=0.1)\n"
    assert apply(edit, code) == (
        "from torch.optim import AdamW\nopt = AdamW(params, lr=1e-3, weight_decay=0.1, eps=1e-8)\n"
    )


HOIST = rule(
    match={
        "pattern": "fuse($A) * $B",
        "assigned": ["$A, $B = $X.chunk(2)"],
        "simple": ["X"],
        "hoist": {"X": "{A}_{B}"},
    },
    fix={"template": "fused($X)", "add_import": []},
    examples=[{"before": "a", "after": "b"}],
)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (  # the call's result is named on a line of its own, comment and indentation kept
            "def f(x):\n    # split\n    a, b = proj(x).chunk(2)\n    if x:\n        return fuse(a) * b\n",
            "def f(x):\n    # split\n    a_b = proj(x)\n    a, b = a_b.chunk(2)\n"
            "    if x:\n        return fused(a_b)\n",
        ),
        (  # a plain name needs no hoist
            "def f(x):\n    a, b = x.chunk(2)\n    return fuse(a) * b\n",
            "def f(x):\n    a, b = x.chunk(2)\n    return fused(x)\n",
        ),
        (  # two uses of one chunk hoist once
            "def f(x):\n    a, b = p(x).chunk(2)\n    y = fuse(a) * b\n    return y + fuse(a) * b\n",
            "def f(x):\n    a_b = p(x)\n    a, b = a_b.chunk(2)\n"
            "    y = fused(a_b)\n    return y + fused(a_b)\n",
        ),
    ],
)
def test_a_hoist_names_what_the_template_repeats(code: str, expected: str) -> None:
    assert apply(HOIST, code) == expected


@pytest.mark.parametrize(
    "code",
    [
        "def f(x):\n    a, b = p(x).chunk(2)\n    a_b = 1\n    return fuse(a) * b\n",  # the name is taken
        "def f(x):\n    a, b = p(x).chunk(2); c = 1\n    return fuse(a) * b\n",  # the line holds more
        "def f(x):\n    if x: a, b = p(x).chunk(2)\n    return fuse(a) * b\n",  # a one-line suite
    ],
)
def test_no_hoist_where_it_cannot_be_made_and_no_fix_then(code: str) -> None:
    assert apply(HOIST, code) == code


def test_a_hoist_must_name_an_assigned_metavariable() -> None:
    with pytest.raises(ValueError, match="hoist"):
        rule(match={"pattern": "fuse($A)", "assigned": ["$A = g($X)"], "hoist": {"A2": "n"}})
    with pytest.raises(ValueError, match="unknown metavariable"):
        rule(match={"pattern": "fuse($A)", "assigned": ["$A = g($X)"], "hoist": {"X": "{Q}"}})


def test_a_statements_step_over_a_branch_is_for_reports_only() -> None:
    """An `if_test` step steps over a branch whatever it does (BERT's relative-position scores):
    a report may, a fix would drop the branch with the statements it removes."""
    steps = [
        {"pattern": "$A = torch.matmul($Q, $K.transpose(-1, -2))"},
        {"if_test": '$T == "relative_key"', "optional": True},
        {"pattern": "$P = torch.softmax($A, dim=-1)"},
    ]
    match = {"statements": steps, "into": "torch.matmul($P, $V)"}
    reported = rule(applicability="manual", match=match)
    code = (
        "import torch\ndef f(self, q, k, v):\n    a = torch.matmul(q, k.transpose(-1, -2))\n"
        '    if self.kind == "relative_key":\n        a = a + self.bias\n'
        "    p = torch.softmax(a, dim=-1)\n    return torch.matmul(p, v)\n"
    )
    found = migrate_source(code.encode(), RuleIndex([reported]), SAFE).findings
    assert [(f.rule.code, f.line, f.end_line) for f in found] == [("HOU901", 3, 7)]
    with pytest.raises(ValueError, match="report rules only"):
        rule(match=match, fix={"template": "fused($Q, $K, $V)"})
    with pytest.raises(ValueError, match="a `pattern` or an `if_test`"):
        rule(applicability="manual", match={"statements": [{"optional": True}], "into": "x"})


def test_a_call_template_passes_a_keyword_mapping_on_only_where_nothing_stands_for_absence() -> None:
    """`passes_mapping`: `**opt_args` goes last into the new call; a template with `defaults` is
    not filled, since the mapping may or may not carry what a default stands for; `*args` never."""
    base = {
        "call": ["apex.optimizers.FusedSGD"],
        "signature": ["params", "lr", "momentum"],
        "strict": True,
        "passes_mapping": True,
        "args": {"lr": {"present": True}},
    }
    template = "torch.optim.SGD($params, lr=$lr, momentum=$momentum, fused=True)"
    passed_on = rule(match=base, fix={"template": template}, examples=[{"before": "a", "after": "b"}])
    code = "import apex\nopt = apex.optimizers.FusedSGD(ps, momentum=0.9, **opt_args)\n"
    assert apply(passed_on, code).splitlines()[-1] == (
        "opt = torch.optim.SGD(ps, momentum=0.9, fused=True, **opt_args)"
    )
    assert apply(passed_on, "import apex\nopt = apex.optimizers.FusedSGD(*groups, **opt_args)\n").endswith(
        "FusedSGD(*groups, **opt_args)\n"
    )
    defaulted = rule(
        match=base,
        fix={"template": template, "defaults": {"momentum": "0.0"}},
        examples=[{"before": "a", "after": "b"}],
    )
    assert apply(defaulted, code) == code
    strict = rule(
        match={**base, "passes_mapping": False},
        fix={"template": template},
        examples=[{"before": "a", "after": "b"}],
    )
    assert apply(strict, code) == code  # without it, a mapping keeps the call as it is
