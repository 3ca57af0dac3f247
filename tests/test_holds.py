"""Never worse than unmigrated (engine.holds): a rewritten CUDA guard must not lead an NPU run
into CUDA-only code left behind, and code that already handles the NPU stays as it is."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from npu_migrate.engine.holds import children, names_npu, subtree
from npu_migrate.engine.index import RuleIndex
from npu_migrate.engine.source import migrate_source
from npu_migrate.model import Applicability, FileResult
from npu_migrate.rules.files import opt_in_sets
from npu_migrate.rules.load import load_rules

from .test_cli import project, run_cli

INDEX = RuleIndex(load_rules())
NPU_FUSED = RuleIndex(load_rules(opt_in_sets().values()))  # torch_npu's own fused optimizers
SAFE = frozenset({Applicability.safe})
UNSAFE = frozenset({Applicability.safe, Applicability.unsafe})


def run(code: str, enabled: frozenset[Applicability] = SAFE) -> tuple[str, FileResult]:
    result = migrate_source(code.encode(), INDEX, enabled)
    return (result.new_source or code.encode()).decode(), result


def held(result: FileResult) -> dict[tuple[str, int], str]:
    return {(f.rule.code, f.line): f.held.why for f in result.findings if f.held}


@pytest.mark.parametrize(
    ("text", "npu"),
    [("torch_npu", True), ("is_torch_npu_available", True), ("isNpuAvailable", True),
     ("NPUAccelerator", True), ('"npu:0"', True), ('"hccl"', True), ("input", False),
     ("inputs", False), ("snpu", False), ("INPUT", False), ("isNPUAvailable", True), ("NPUs", True)],
)  # fmt: skip
def test_the_npu_is_named_as_a_word(text: str, npu: bool) -> None:
    assert names_npu(text) is npu


GUARD = """import torch
if torch.cuda.is_available():
    torch.cuda.manual_seed_all(0)
    major, _ = torch.cuda.get_device_capability()
"""


def test_a_guard_over_cuda_only_code_keeps_its_cuda_test() -> None:
    new, result = run(GUARD)
    assert "if torch.cuda.is_available():" in new  # dead on an NPU, as before the migration
    assert "torch.npu.manual_seed_all(0)" in new  # the guarded code that has a fix still gets it
    assert "torch.cuda.get_device_capability()" in new
    why = held(result)[("NPU101", 2)]
    assert "torch.cuda.get_device_capability" in why and "NPU106" in why
    guard = next(f for f in result.findings if f.line == 2)
    assert guard.replacement is None and not guard.applied


def test_a_scan_predicts_the_hold() -> None:
    _, result = run(GUARD, frozenset())
    assert ("NPU101", 2) in held(result)


def test_a_guard_over_harmless_code_is_migrated() -> None:
    code = "import torch\nif torch.cuda.is_available():\n    torch.backends.cudnn.deterministic = True\n"
    new, result = run(code)
    assert "if torch.npu.is_available():" in new and not held(result)


def test_a_guard_over_an_unapplied_unsafe_fix_is_held_only_without_unsafe() -> None:
    code = "import torch\nif torch.cuda.is_available():\n    torch.cuda.nvtx.range_push('step')\n"
    safe, _ = run(code)
    assert "if torch.cuda.is_available():" in safe
    unsafe, result = run(code, UNSAFE)
    assert "if torch.npu.is_available():" in unsafe and "torch.npu.mstx.range_push" in unsafe
    assert not held(result)


def test_a_short_circuit_guard_is_held() -> None:
    code = "import torch\nok = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8\n"
    new, result = run(code)
    assert new == code and ("NPU101", 2) in held(result)
    assert "import torch_npu" not in new  # a held fix needs no import


def test_an_if_chain_with_an_npu_branch_stays_as_it_is() -> None:
    code = """import torch
def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()
    elif device == "npu":
        torch.npu.synchronize()
    return torch.zeros(1).cuda()
"""
    new, result = run(code)
    assert new == code.replace("torch.zeros(1).cuda()", "torch.zeros(1).npu()").replace(
        "import torch\n", "import torch\nimport torch_npu\n"
    )
    assert set(held(result)) == {("NPU105", 3), ("NPU101", 4)}
    assert all("tests for the NPU" in why for why in held(result).values())


def test_a_mapping_with_an_npu_entry_stays_as_it_is() -> None:
    code = 'import torch\nSYNC = {"cuda": torch.cuda.synchronize, "npu": torch.npu.synchronize}\n'
    new, result = run(code)
    assert new == code and ("NPU101", 2) in held(result)


def test_no_npu_call_is_written_where_torch_npu_is_missing() -> None:
    code = """import torch
import torch.nn.functional as F
try:
    import torch_npu
except ImportError:
    torch_npu = None
def attend(q, k, v):
    if torch_npu is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return torch_npu.npu_fusion_attention(q, k, v, q.shape[1], "BNSD", sparse_mode=2)[0]
"""
    new, result = run(code, UNSAFE)
    assert new == code
    assert ("NPU901", 9) in held(result)


def test_held_findings_are_labelled_and_explained_in_every_report(tmp_path) -> None:
    root = project(tmp_path, {"a.py": GUARD})
    scan = run_cli("scan", root, cwd=tmp_path)
    assert "NPU101 [held]" in scan.stdout and "fix held back: it guards" in scan.stdout
    run_cli("apply", root, cwd=tmp_path)
    rows = (tmp_path / "proj-npu-migrate-changes.csv").read_text()
    assert "(fix held back: it guards `torch.cuda.get_device_capability` (NPU106)" in rows
    assert "if torch.cuda.is_available():" in (root / "a.py").read_text()


def test_a_fused_optimizer_is_held_in_a_file_that_mentions_bf16() -> None:
    """torch_npu's NpuFused* (the opt-in set) refuse bf16 parameters; torch's fused=True (the
    catalog) takes them."""
    code = (
        "import torch\nmodel = model.to(torch.bfloat16).cuda()\nopt = torch.optim.AdamW(model.parameters())\n"
    )
    result = migrate_source(code.encode(), NPU_FUSED, UNSAFE)
    assert (
        result.new_source is not None and b"opt = torch.optim.AdamW(model.parameters())" in result.new_source
    )
    assert "refuse bf16 parameters" in held(result)[("NPU941", 3)]
    plain = code.replace(".to(torch.bfloat16)", "")
    assert b"NpuFusedAdamW" in (migrate_source(plain.encode(), NPU_FUSED, UNSAFE).new_source or b"")
    assert "opt = torch.optim.AdamW(model.parameters(), fused=True)" in run(code, UNSAFE)[0]


def test_zero_grad_set_to_none_is_reported_only_beside_a_fused_optimizer() -> None:
    step = "optimizer.zero_grad(set_to_none=True)\n"
    _, alone = run("import torch\n" + step)
    assert not alone.findings
    _, torchs = run("import torch\noptimizer = torch.optim.Adam(params, 1e-3)\n" + step)
    assert "NPU915" not in {f.rule.code for f in torchs.findings}  # torch's optimizers take it
    _, beside = run("import torch_npu\noptimizer = torch_npu.optim.NpuFusedAdam(params, 1e-3)\n" + step)
    assert {"NPU915", "NPU928"} <= {f.rule.code for f in beside.findings}


def test_an_early_return_guards_the_rest_of_its_block() -> None:
    code = """import torch
def info():
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_capability()
"""
    new, result = run(code)
    assert new == code and ("NPU101", 3) in held(result)
    _, scanned = run(code, frozenset())
    assert ("NPU101", 3) in held(scanned)
    harmless = code.replace("torch.cuda.get_device_capability()", "torch.cuda.device_count()")
    assert "if not torch.npu.is_available():" in run(harmless)[0]


RNG_SPLIT = """\
import torch


def get_state():
    return torch.cuda.get_rng_state()


def set_state(new_state):
    def cb():
        torch.cuda.default_generators[0].set_state(new_state)

    torch.cuda._lazy_call(cb)  # npu-migrate: ignore[NPU101]
"""


def test_one_device_state_stays_on_one_device() -> None:
    """Megatron's RNG tracker, its getter moved to the NPU while its setter queued on CUDA,
    restored nothing and said nothing: where one use of the RNG state stays CUDA (here the
    author keeps the queue), none of the others moves; a file whose RNG uses all move is
    rewritten whole, and a use of another state is not held for it."""
    out, result = run(RNG_SPLIT)
    reasons = held(result)
    assert set(reasons) == {("NPU101", 5), ("NPU101", 10)}, reasons  # line 12 is suppressed: not reported
    assert "keeps the rng state on CUDA" in reasons[("NPU101", 5)] and "line 12" in reasons[("NPU101", 5)]
    assert out == RNG_SPLIT
    moved, result = run(RNG_SPLIT.replace("  # npu-migrate: ignore[NPU101]", ""))
    assert not held(result) and "torch.cuda" not in moved
    other_state = RNG_SPLIT.replace("return torch.cuda.get_rng_state()", "torch.cuda.synchronize()")
    synchronized, result = run(other_state)
    assert "torch.npu.synchronize()" in synchronized and ("NPU101", 10) in held(result)


# ----------------------------------------------------------------------------- children


_TOKENS = (
    cst.BaseParenthesizableWhitespace, cst.TrailingWhitespace, cst.EmptyLine, cst.Comment, cst.Newline,
    cst.Comma, cst.LeftParen, cst.RightParen, cst.LeftSquareBracket, cst.RightSquareBracket,
    cst.LeftCurlyBrace, cst.RightCurlyBrace, cst.Dot, cst.Colon, cst.Semicolon, cst.AssignEqual,
    cst.BaseBinaryOp, cst.BaseBooleanOp, cst.BaseCompOp, cst.BaseUnaryOp, cst.BaseAugOp,
    cst.Asynchronous, cst.ImportStar, cst.ParamSlash, cst.ParamStar,
)  # fmt: skip
EVERY_FORM = """
@decorator(arg)
class A(Base, metaclass=M):
    @property
    def f(self, a, /, b: int = 1, *args, c=2, **kwargs) -> "A":
        x = y if cond(z) else w
        try:
            pass
        except (E, F) as e:
            raise G from e
        match x:
            case [p, *q] if p > q:
                return f(k=v, *s, **t)
        return lambda m, /, n=1: m + n
"""


def test_children_come_in_source_order() -> None:
    """holds.children reads a node's fields: every node's children are libcst's, and all but
    the tokens in libcst's (source) order, on every form whose fields put code out of order and
    on the fixture projects."""
    sources = [EVERY_FORM, *(p.read_bytes() for p in sorted(Path("fixtures").rglob("*.py")))]
    seen: set[str] = set()
    for source in sources:
        try:
            module = cst.parse_module(source)
        except cst.ParserSyntaxError:  # fixtures of files no tool can read
            continue
        for node in subtree(module):
            seen.add(type(node).__name__)
            ours, libcsts = children(node), node.children
            assert {id(c) for c in ours} == {id(c) for c in libcsts}, type(node).__name__
            code = [id(c) for c in ours if not isinstance(c, _TOKENS)]
            assert code == [id(c) for c in libcsts if not isinstance(c, _TOKENS)], type(node).__name__
    assert {"Arg", "IfExp", "FunctionDef", "ClassDef", "ExceptHandler", "MatchCase", "Parameters"} <= seen


EAGER = """import torch
class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_drop = torch.nn.Dropout(0.0)

    def forward(self, q, k, v):
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        {target} = {reader}
        return attn
"""


@pytest.mark.parametrize("target", ["attn", "attn, _"])
@pytest.mark.parametrize(
    ("reader", "fused"),
    [
        ("(attn @ v).transpose(1, 2)", True),  # the reader assigns attn again: its own from there on
        ("(attn @ v).transpose(1, 2) + attn.sum()", False),  # and reads the scores besides `into`
    ],
    ids=["rebinds", "reads-besides-into"],
)
def test_a_statements_reader_that_assigns_a_computed_name_again_owns_it(
    target: str, reader: str, fused: bool
) -> None:
    """As one name or in a tuple."""
    reader = f"({reader}), None" if "," in target else reader
    _, result = run(EAGER.format(target=target, reader=reader), UNSAFE)
    (finding,) = [f for f in result.findings if f.rule.code == "NPU947"]
    assert finding.applied is fused, finding.held
    if not fused:
        assert finding.held is not None and "`attn`, which these statements compute, is read there" in (
            finding.held.why
        )
