"""The region engine (engine.regions): a scan that parses only the statements around the rules'
anchors must find exactly what parsing the whole file finds, position for position, on every
rule example of the catalog and on the layouts that make statements hard to cut out."""

from __future__ import annotations

import ast
from collections import Counter

import pytest

from npu_migrate.engine.index import RuleIndex
from npu_migrate.engine.kinds import content_of
from npu_migrate.engine.names import ImportTable
from npu_migrate.engine.regions import import_bindings, line_starts, regions, split_lines
from npu_migrate.engine.source import migrate_whole, scan_regions
from npu_migrate.model import Applicability, FileResult, ModulePath
from npu_migrate.prefilter import spelled_by_the_module, tokens, word_counts
from npu_migrate.rules.load import load_rules

RULES = [r for r in load_rules() if content_of(r.match) == "python"]  # shell rules: test_shell.py
INDEX = RuleIndex(RULES)


def both_roads(source: bytes) -> tuple[FileResult | None, FileResult]:
    counts = word_counts(source.decode("latin-1"))
    return scan_regions(source, INDEX, frozenset(), counts), migrate_whole(source, INDEX, frozenset())


def assert_same(source: bytes) -> FileResult | None:
    """The two roads agree; None where a rule the file may spell reads the whole file (a rank
    guard follows parameters to their calls), which the region road then leaves to the other."""
    regions, whole = both_roads(source)
    if regions is None:
        survey = INDEX.anchors.survey(source.decode(), word_counts(source.decode()))
        assert survey is not None and survey.whole, "the region road gave up"
        return None

    def key(result: FileResult) -> list[tuple]:
        return [
            (f.rule.code, f.line, f.column, f.end_line, f.code, f.replacement, f.held)
            for f in result.findings
        ]

    assert key(regions) == key(whole)
    assert regions.overridden == whole.overridden
    return whole


EXAMPLES = [
    (rule.code, number, code)
    for rule in RULES
    for number, example in enumerate(rule.examples, start=1)
    for code in (example.before, example.flagged, example.ok)
    if code
]


@pytest.mark.parametrize(("code", "number", "source"), EXAMPLES, ids=[f"{c}-{n}" for c, n, _ in EXAMPLES])
def test_every_rule_example_is_found_the_same_by_regions(code: str, number: int, source: str) -> None:
    assert_same(source.encode())


LAYOUTS = {
    "elif header": "import torch\nif a:\n    pass\nelif torch.cuda.is_available():\n    x = 1\n",
    "one-line if": "import torch\nif torch.cuda.is_available(): x.cuda()\n",
    "guard over CUDA-only code": (
        "import torch\nif torch.cuda.is_available():\n"
        "    x = 1\n    cap = torch.cuda.get_device_capability()\n"
    ),
    "early return": (
        "import torch\ndef f():\n    if not torch.cuda.is_available():\n        return\n"
        "    x = 1\n    return torch.cuda.get_device_capability()\n"
    ),
    "npu branch in a chain": (
        "import torch\ndef sync(device):\n    if device == 'npu':\n        torch.npu.synchronize()\n"
        "    else:\n        torch.cuda.synchronize()\n"
    ),
    "handlers without torch_npu": (
        "import torch\ntry:\n    import torch_npu\nexcept ImportError:\n    x = torch.zeros(1).cuda()\n"
    ),
    "while guard": "import torch\nwhile torch.cuda.is_available():\n    import cupy\n",
    "one-line else import": "try:\n    import os\nexcept ImportError: os = None\nelse: import cupy\n",
    "decorator": "import torch\n@torch.jit.script\ndef f(x):\n    return x\n",
    "def header default": (
        "import torch.nn as nn\nclass Block:\n    # the block\n    def __init__(self, act=nn.GELU):\n"
        "        super().__init__()\n        self.act = act()\n"
    ),
    "comments above": "import torch\n\n# note\n\n# more\nn = torch.cuda.device_count()\n",
    "crlf": "import torch\r\nclass A:\r\n    def f(self):\r\n        return torch.cuda.device_count()\r\n",
    "cr only": "import torch\rdef f():\r    return torch.cuda.device_count()\r",
    "tabs": "import torch\nclass A:\n\tdef f(self):\n\t\tx.cuda()\n",
    "form feed": "import torch\n\x0c\ndef f():\n    torch.cuda.synchronize()\n",
    "leaf alias": "from torch.cuda import synchronize as sync\nsync()\n",
    "prefix alias": "from torch import cuda as tc\ntc.empty_cache()\nprint(tc.nvtx)\n",
    "f-string device": "import torch\nrank = 0\ndevice = f'cuda:{rank}'\n",
    "string on a later line": "import torch\nt = torch.zeros(\n    3,\n    device='cuda',\n)\n",
    "backslash": "import torch\nn = torch.cuda \\\n    .device_count()\n",
    "comment inside a chain": "import torch\nn = (torch.cuda  # c\n     .device_count())\n",
    "import in a function": (
        "def f():\n    try:\n        import apex\n    except ImportError:\n        apex = None\n"
        "    return apex\n"
    ),
    "nested functions": (
        "import torch\ndef outer():\n    def inner(x):\n        return x.cuda()\n    return inner\n"
    ),
    "doctest": (
        '"""\n>>> import torch\n>>> torch.cuda.synchronize()\n"""\nimport torch\ntorch.cuda.empty_cache()\n'
    ),
    "match statement": (
        "import torch\nmatch mode:\n    case 'gpu':\n        d = torch.device('cuda')\n"
        "    case _:\n        d = None\n"
    ),
    "class attribute": "import torch\nclass Cfg:\n    backend = 'nccl'\n    device = 'cuda:0'\n",
    "big statement": "import torch\nCFG = dict(\n"
    + "".join(f"    k{i}={i},\n" for i in range(50))
    + "    d='cuda',\n)\n",
    "swiglu in a function": (
        "import torch\nimport torch.nn.functional as F\n\ndef forward(self, x):\n    x = self.w(x)\n"
        "    a, b = x.chunk(2, dim=-1)\n    return self.o(F.silu(a) * b)\n"
    ),
    "anchor only in a comment": "import torch\n# torch.cuda.synchronize() is not called here\nx = 1\n",
    "with header": "import torch\nwith torch.cuda.amp.autocast():\n    y = model(x)\n",
    # llama-models' scripts: the literal a function returns reaches a device through its calls
    "returned device": (
        "import torch\ndef get_device():\n    if torch.cuda.is_available():\n        return 'cuda'\n"
        "    return 'cpu'\n\ndef main():\n    device = get_device()\n"
    ),
    # YOLOv5's select_device: the literal reaches torch.device through a variable
    "device through a variable": (
        "import torch\ndef select(arg):\n    x = 1\n    arg = 'cuda:0'\n    y = 2\n"
        "    return torch.device(arg)\n"
    ),
    # timm's Attention: a mask helper between the scores and the softmax (no eager-attention run)
    "eager attention around a mask helper": (
        "import torch\ndef forward(self, q, k, v, mask):\n    q = q * self.scale\n"
        "    attn = q @ k.transpose(-2, -1)\n    bias = resolve_mask(attn, mask)\n"
        "    attn = attn.softmax(dim=-1)\n    return attn @ v\n"
    ),
    "eager attention in a branch": (
        "import torch\nclass A(torch.nn.Module):\n    def forward(self, q, k, v):\n"
        "        if self.fused:\n            x = torch.nn.functional.scaled_dot_product_attention(q, k, v)\n"
        "        else:\n            attn = (q @ k.transpose(-2, -1)) * self.scale\n"
        "            attn = attn.softmax(dim=-1)\n            x = attn @ v\n        return x\n"
    ),
    # engine.partial_tree: definitions away from the anchors are stubs in the stdlib's tree
    "definitions around the anchored one": (
        "import torch\n\n@register\ndef helper(x):\n    return x\n\n# the model\nclass Net:\n"
        "    def forward(self, x):\n        return helper(x).cuda()\n\ndef create(**kw):\n"
        "    from functools import partial\n    return partial(Net, **kw)\n\nclass Other:\n    pass\n"
    ),
    "a script's top level between definitions": (
        "import torch\nimport torch.nn.functional as F\n\ndef before():\n    return 1\n\n"
        "x = w(inputs)\na, b = x.chunk(2, dim=-1)\ny = F.silu(a) * b\n\ndef after():\n    return 2\n"
    ),
}


@pytest.mark.parametrize("source", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_hard_layouts_are_found_the_same_by_regions(source: str) -> None:
    assert_same(source.encode())


def test_a_latin1_file_is_found_the_same() -> None:
    result = assert_same("# -*- coding: latin-1 -*-\nimport torch\ns = 'é'\nx.cuda()\n".encode("latin-1"))
    assert result is not None and result.findings


def test_a_file_python_cannot_parse_is_left_to_the_whole_road() -> None:
    regions, whole = both_roads(b"import torch\ntorch.cuda.synchronize(\n")
    assert regions is None
    assert whole.error is not None


def test_the_region_road_finds_what_it_should_not_skip() -> None:
    """Not vacuous: the layouts above do produce findings, through the region road."""
    results = [assert_same(source.encode()) for source in LAYOUTS.values()]
    found = [result is not None and bool(result.findings) for result in results]
    assert sum(found) >= len(LAYOUTS) - 2  # only the comment-only and one import-only case are empty


def region_lines(source: str) -> list[tuple[int, int]]:
    """The lines the region road hands to libcst: (first, last) of each region."""
    lines = split_lines(source)
    starts = line_starts(lines)
    tree = ast.parse(source)
    survey = INDEX.anchors.survey(source, word_counts(source))
    assert survey is not None
    anchored = survey.lines(ImportTable.of_ast(tree).bound, starts)
    return [(r.first, r.last) for r in regions(tree, lines, *anchored)]


LONG_BODY = "".join(f"    y{i} = f(y{i - 1})\n" for i in range(1, 40))


def test_a_device_literal_that_flows_nowhere_needs_only_its_statement() -> None:
    """A literal that a `flows` rule matches reads its whole function only where it is assigned
    or returned; passed straight to `.to()`, its statement is enough."""
    passed = f"import torch\ndef f(model):\n    y0 = 0\n{LONG_BODY}    model.to('cuda')\n"
    assert region_lines(passed)[-1] == (43, 43)
    assigned = f"import torch\ndef f():\n    y0 = 0\n{LONG_BODY}    d = 'cuda'\n    return g(device=d)\n"
    assert region_lines(assigned)[-1] == (2, 44)
    assert_same(passed.encode())
    assert_same(assigned.encode())


def test_a_value_moved_through_its_name_is_looked_for_only_where_it_is_assigned() -> None:
    """NPU408's float64 tensor moved later through its name: the function is read where the
    factory's statement assigns it; moved at once, its statement is enough; at a script's top
    level, an assignment reads the script."""
    head = f"import torch\ndef f():\n    y0 = 0\n{LONG_BODY}"
    at_once = head + "    g(torch.ones(3, dtype=torch.double).cuda())\n"
    assert region_lines(at_once)[-1] == (43, 43)
    named = head + "    t = torch.zeros(3, dtype=torch.float64)\n"
    assert region_lines(named + "    return t.cuda()\n")[-1] == (2, 44)
    script = "import torch\nx = 1\nt = torch.zeros(3, dtype=torch.float64)\nt = t.cuda()\n"
    assert region_lines(script)[-1] == (1, 4)
    for source in (at_once, named + "    return t.cuda()\n", script):
        assert_same(source.encode())


def test_a_function_whose_blocks_hold_no_run_of_the_steps_is_not_read_for_them() -> None:
    """Eager attention's words in one function but no run of statements of its shape (the
    scores, then a helper, then the softmax): the statements rules do not ask for the function."""
    source = LAYOUTS["eager attention around a mask helper"] + f"def g():\n    y0 = 0\n{LONG_BODY}"
    assert all(last - first < 5 for first, last in region_lines(source))
    run = LAYOUTS["eager attention in a branch"]
    assert region_lines(run)[-1] == (3, 10)  # the whole forward: the data flow is read there


def test_a_file_is_read_whole_for_a_method_a_match_reads_only_where_it_defines_one() -> None:
    """diffusers' GEGLU calls its own `self.gelu` (NPU958 reads that method's body): a class that
    defines the method is read whole; timm's module-level `def gelu(x)` is no such method."""
    use = "class GEGLU(nn.Module):\n    def forward(self, x):\n        return x * self.gelu(x)\n"
    function = "import torch.nn.functional as F\ndef gelu(x, inplace=False):\n    return F.gelu(x)\n"
    method = "    def gelu(\n        self, gate\n    ):\n        return F.gelu(gate)\n"
    assert scan_regions(*_scan_arguments(function + use)) is not None
    assert scan_regions(*_scan_arguments(use + method)) is None
    assert_same((function + use).encode())


def _scan_arguments(source: str) -> tuple[bytes, RuleIndex, frozenset[Applicability], Counter[str]]:
    return source.encode(), INDEX, frozenset(), word_counts(source)


@pytest.mark.parametrize("source", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_cheap_import_bindings_cover_the_real_ones(source: str) -> None:
    """Read from the `import` lines alone, the bindings are a superset of the file's, or None
    (`else: import x` cannot be read alone): then the file is parsed to find them."""
    lines = split_lines(source)
    cheap = import_bindings(source, lines, line_starts(lines))
    real = ImportTable.of_ast(ast.parse(source)).bound
    if "else: import" in source:
        assert cheap is None
    else:
        assert cheap is not None and set(real) <= set(cheap)


def test_the_two_import_tables_agree() -> None:
    import libcst as cst

    source = (
        "import a.b\nimport a.b as c\nfrom m import x, y as z\nfrom . import rel\nfrom n import *\n"
        "def f():\n    import inner as i\n    from deep.mod import leaf\n"
    )
    from_cst = ImportTable.of(cst.parse_module(source))
    from_ast = ImportTable.of_ast(ast.parse(source))
    assert from_cst.bindings == from_ast.bindings
    assert from_cst.named == from_ast.named
    assert from_cst.bound == from_ast.bound


IMPORT_FORMS = {  # each read without the parser where it is one plain line, as the parser reads it
    "plain": "import os\nimport torch.nn as nn, numpy\n",
    "from": "from torch.nn import functional as F, Linear  # a comment\n",
    "relative": "from . import utils\nfrom ..layers import Mlp as M\n",
    "tabs": "import\ttorch\tas\tt\r\nfrom\tx\timport\ty\r\n",
    "parenthesised": "from torch import (\n    nn,\n    cuda as c,\n)\n",
    "continued": "import os, \\\n    sys\n",
    "in a block": "try:\n    import apex\nexcept ImportError:\n    apex = None\n",
    "words around": "reimport = 1\nx.import_module('a')\nimport_ = 2\n",
}


@pytest.mark.parametrize("source", IMPORT_FORMS.values(), ids=IMPORT_FORMS.keys())
def test_import_lines_bind_what_the_parser_binds(source: str) -> None:
    lines = split_lines(source)
    module = ModulePath("pkg.sub.mod", "pkg.sub")
    cheap = import_bindings(source, lines, line_starts(lines), module)
    assert cheap is not None and sorted(set(cheap)) == sorted(
        set(ImportTable.of_ast(ast.parse(source), module).bound)
    )


def test_the_words_a_module_spells_are_read_at_line_starts_only() -> None:
    """Its top-level definitions and relative imports at a line's start, the names its imports
    bring, through parentheses and continued lines; not those an indented or commented line
    mentions."""
    source = (
        "from .sibling import a\nclass Top: pass\nasync def run(): pass\n  def inner(): pass\n"
        "x = 1  # from .elsewhere import z\nfrom torch import (nn,\n    cuda)\nimport os, \\\n    sys\n"
    )
    spelled = spelled_by_the_module(source, ModulePath("pkg.mod", "pkg"))
    assert {".Top", ".run", "pkg", "mod"} <= spelled and ".inner" not in spelled
    assert {".nn", ".cuda", ".os", ".sys", ".a"} <= tokens(source)
    assert not spelled_by_the_module("x = 1  # from . import y\n", ModulePath("pkg.mod", "pkg")) & {"pkg"}
