"""The program model (engine.program) and the holds it decides (engine.program_holds): each guard
form, each way a value flows, and what stops the flow, unit by unit through the engine."""

from __future__ import annotations

import ast

import pytest

from npu_migrate.engine import program_holds
from npu_migrate.engine.index import RuleIndex
from npu_migrate.engine.program.model import Program
from npu_migrate.engine.reasons import COMPARED_ACROSS_FILES, DATA_DEVICE_UNSEEN, DEVICE_FROM_CALLER
from npu_migrate.engine.source import migrate_source
from npu_migrate.model import Applicability, FileResult
from npu_migrate.rules.files import opt_in_sets
from npu_migrate.rules.load import load_rules

INDEX = RuleIndex(load_rules())
NPU_FUSED = RuleIndex(load_rules(opt_in_sets().values()))  # torch_npu's own fused optimizers
SAFE = frozenset({Applicability.safe})


def run(code: str) -> tuple[str, FileResult]:
    result = migrate_source(code.encode(), INDEX, SAFE)
    assert result.error is None, result.error
    return (result.new_source or code.encode()).decode(), result


def reasons(result: FileResult) -> dict[tuple[str, int], str]:
    return {(f.rule.code, f.line): f.held.reason for f in result.findings if f.held}


CAPABILITY = "torch.cuda.get_device_capability()"  # NPU106: manual, stays CUDA code


@pytest.mark.parametrize(
    "code",
    [
        f"import torch\nok = not torch.cuda.is_available() or {CAPABILITY}[0] < 8\n",
        f"import torch\nfor k in range(torch.cuda.device_count()):\n    print({CAPABILITY})\n",
        f"import torch\ncaps = [{CAPABILITY} for k in range(torch.cuda.device_count())]\n",
        f"import torch\ndef f():\n    assert torch.cuda.is_available()\n    return {CAPABILITY}\n",
        f"import torch\ndef f():\n    if not torch.cuda.is_available():\n        pytest.skip('no GPU')\n"
        f"    return {CAPABILITY}\n",
        f"import pytest, torch\n@pytest.mark.skipif(not torch.cuda.is_available(), reason='GPU')\n"
        f"def test_f():\n    {CAPABILITY}\n",
        f"import torch\nwhile torch.cuda.is_available():\n    {CAPABILITY}\n",
        f"import torch\nx = {CAPABILITY} if torch.cuda.is_available() else None\n",
    ],
    ids=["or", "loop-bound", "comprehension", "assert", "skip-exit", "skipif", "while", "ifexp"],
)
def test_every_guard_form_keeps_its_cuda_test(code: str) -> None:
    new, result = run(code)
    assert new == code  # the test stays CUDA: an NPU host skips the capability call as before
    assert set(reasons(result).values()) == {"it guards CUDA code left"}


@pytest.mark.parametrize(
    ("code", "probe_line"),
    [
        (f"import torch\nuse = torch.cuda.is_available()\ndef f():\n    if use:\n        {CAPABILITY}\n", 2),
        (f"import torch\nclass M:\n    def __init__(self):\n        self.gpu = torch.cuda.is_available()\n"
         f"    def f(self):\n        if self.gpu:\n            {CAPABILITY}\n", 4),
        (f"import torch\ndef has_gpu():\n    return torch.cuda.is_available()\n"
         f"if has_gpu():\n    {CAPABILITY}\n", 3),
        (f"import torch\ndef f(gpu=torch.cuda.is_available()):\n    if gpu:\n        {CAPABILITY}\n", 2),
        (f"import torch\na = torch.cuda.is_available()\nb = a\nif b:\n    {CAPABILITY}\n", 2),
        (f"import torch\ndef f(d):\n    gpu = d.type == 'cuda'\n    if gpu:\n        {CAPABILITY}\n", 3),
    ],
    ids=["variable", "attribute", "helper-return", "default", "alias", "comparison"],
)  # fmt: skip
def test_a_probe_is_followed_through_the_value_it_flows_into(code: str, probe_line: int) -> None:
    new, result = run(code)
    assert new == code
    assert any(
        line == probe_line and why == "its value guards CUDA code left"
        for (_, line), why in reasons(result).items()
    )


def test_data_is_not_a_question() -> None:
    """`model = model.cuda()` flows into `str(model.device)`: what reads it was not dead on an NPU
    before (the .cuda() call raised), so the move to the NPU is made (ultralytics' test_cuda)."""
    code = f"import torch\nmodel = model.cuda()\nif str(model.device) == 'cpu':\n    {CAPABILITY}\n"
    new, _ = run(code)
    assert "model = model.npu()" in new


def test_a_conjunction_kept_by_its_own_probe_is_not_followed_further() -> None:
    code = (
        "import torch\n"
        "def loader(device=torch.device('cuda')):\n"
        "    on_gpu = torch.cuda.is_available() and device.type == 'cuda'\n"
        f"    if on_gpu:\n        {CAPABILITY}\n"
    )
    new, _ = run(code)
    assert "device=torch.device('npu')" in new  # the default needs no hold: the `and` is kept CUDA-false
    assert "on_gpu = torch.cuda.is_available() and device.type == 'cuda'" in new


def test_a_guard_over_migrated_code_is_migrated() -> None:
    code = "import torch\nuse = torch.cuda.is_available()\nif use:\n    torch.cuda.synchronize()\n"
    new, result = run(code)
    assert "use = torch.npu.is_available()" in new and "torch.npu.synchronize()" in new
    assert not reasons(result)


@pytest.mark.parametrize(
    ("code", "held"),
    [
        ("from tests import CUDA_OK\nassert torch.cuda.is_available() == CUDA_OK\n", True),
        ("from .flags import N\nexpected = N\nassert torch.cuda.device_count() != expected\n", True),
        ("def f(n):\n    assert torch.cuda.device_count() == n\n", False),  # no import: the caller's
        ("from cfg import N\nassert torch.cuda.device_count() >= N\n", False),  # an order, not an equality
        ("CUDA_OK = False\nassert torch.cuda.is_available() == CUDA_OK\n", False),  # the file's own value
    ],
)
def test_a_probe_asked_to_equal_a_value_another_file_decides_is_held(code: str, held: bool) -> None:
    _, result = run("import torch\n" + code)
    assert (COMPARED_ACROSS_FILES in reasons(result).values()) is held


def test_a_fused_optimizer_is_held_where_the_caller_chooses_the_device() -> None:
    """kornia's tests build their optimizers over parameters on the `device` fixture, the CPU by
    default: NpuFusedSGD (the opt-in set) raises there ("Tensors to combine must be on NPU"), so
    only its fix outside such a function is made; torch's fused=True (the catalog) runs there."""
    code = (
        "import torch\n"
        "def test_step(device):\n"
        "    opt = torch.optim.SGD(model.to(device).parameters(), lr=0.1)\n"
        "model.cuda()\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    )
    result = migrate_source(code.encode(), NPU_FUSED, frozenset(Applicability))
    new = (result.new_source or b"").decode()
    assert "opt = torch.optim.SGD(model.to(device)" in new and "\nopt = torch_npu.optim.NpuFusedSGD(" in new
    assert reasons(result)[("NPU943", 3)] == DEVICE_FROM_CALLER
    fused = (migrate_source(code.encode(), INDEX, frozenset(Applicability)).new_source or b"").decode()
    assert fused.count("lr=0.1, fused=True)") == 2


def test_a_fused_optimizer_is_made_only_where_its_parameters_are_seen_going_to_an_accelerator() -> None:
    """Lightning's tests train a BoringModel on the CPU accelerator: its configure_optimizers
    builds torch.optim.SGD over parameters the trainer placed, and NpuFusedSGD (the opt-in set)
    raised there."""
    placed = {
        "model = Net().cuda()\n": True,
        "model = Net().to('cuda:0')\n": True,
        "model = Net()\nmodel.to(torch.device('cuda', rank))\n": True,
        "device = 'cuda'\nmodel = Net()\nmodel = model.to(device)\n": True,
        "device = 'cuda' if torch.cuda.is_available() else 'cpu'\nmodel = Net().to(device).train()\n": True,
        "parser.add_argument('--device', default='cuda')\nmodel = Net().to(parser.parse_args().device)\n": (
            True
        ),
        "device = os.environ['DEVICE']\nmodel = Net()\nmodel.to(device)\n": False,
        "model = Net()\nmodel.to(torch.float16)\n": False,
        "model = Net()\n": False,
    }
    for setup, fused in placed.items():
        code = f"import torch\n{setup}opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        result = migrate_source(code.encode(), NPU_FUSED, frozenset(Applicability))
        assert ("NpuFusedSGD(" in (result.new_source or b"").decode()) == fused, setup
        if not fused:
            assert DATA_DEVICE_UNSEEN in reasons(result).values(), setup
    method = (
        "import torch\nclass M:\n    def configure_optimizers(self):\n"
        "        return torch.optim.SGD(self.layer.parameters(), lr=0.1)\n"
    )
    result = migrate_source(method.encode(), NPU_FUSED, frozenset(Applicability))
    assert reasons(result)[("NPU943", 4)] == DATA_DEVICE_UNSEEN


def test_calls_into_compiled_extensions_are_cuda_code() -> None:
    for extension in (
        "from . import _C",
        "import selective_scan_cuda as _C",
        "_C = load_ext('_ext', ['nms'])",
    ):
        code = f"import torch\n{extension}\ndef f(x):\n    if x.is_cuda:\n        return _C.nms(x)\n"
        new, result = run(code)
        assert "if x.is_cuda:" in new, extension
        assert reasons(result) == {("NPU104", 4): "it guards CUDA code left"}
    torch_own = (
        "import torch\nimport torch.cuda\ndef f(x):\n    if x.is_cuda:\n        torch.cuda.synchronize()\n"
    )
    assert "if x.is_npu:" in run(torch_own)[0]  # `import torch.cuda` binds torch, not an extension


@pytest.mark.parametrize(
    "dual",
    [
        "try:\n    import torch_npu\nexcept ImportError:\n    pass\n",
        "torch_npu = None\n",
        "from accelerate.utils import is_npu_available\nif is_npu_available():\n    pass\n",
    ],
)
def test_a_file_that_keeps_a_path_for_the_npu_is_left_for_its_gpu_path(dual: str) -> None:
    code = f"import torch\n{dual}torch.cuda.synchronize()\n"
    new, result = run(code)
    assert new == code
    assert set(reasons(result).values()) == {"a file with an NPU path beside CUDA"}


def test_a_torch_npu_import_that_must_succeed_is_not_a_second_path() -> None:
    code = "try:\n    import torch_npu\nexcept ImportError:\n    raise SystemExit('no torch_npu')\n"
    assert Program.of(ast.parse(code), code.splitlines(True)).dual_path is None


def test_the_model_reads_only_definitions_around_the_focus_lines() -> None:
    code = "def a():\n    if x:\n        y()\n\ndef b():\n    if z:\n        w()\n"
    lines = code.splitlines(True)
    everything = Program.of(ast.parse(code), lines)
    focused = Program.of(ast.parse(code), lines, focus={6})
    assert [g.header for g in everything.guards] == ["if x:", "if z:"]
    assert [g.header for g in focused.guards] == ["if z:"]


def test_a_parametrized_case_is_bound_to_its_parameter_and_followed_into_a_keyword() -> None:
    code = (
        "import pytest, torch\n"
        "@pytest.mark.parametrize(('devices', 'name'),\n"
        "    [([torch.device('cuda', 0)], 'a'), pytest.param([], 'b')])\n"
        "def test_f(devices, name):\n"
        "    Strategy(parallel_devices=devices, label=name)\n"
    )
    program = Program.of(ast.parse(code), code.splitlines(True), keywords={"parallel_devices"})
    [handed] = program.handed  # `label=` is not asked about
    assert handed.keyword == "parallel_devices"
    [key] = handed.reads
    line = code.splitlines()[2]
    first_elements = [(3, line.index("[torch.device")), (3, line.index("[], 'b'"))]
    assert [v.span.start for v in program.values[key]] == first_elements


def test_a_call_reads_what_its_function_returns_not_an_attribute_of_its_name() -> None:
    code = "import torch\nholder.device = torch.device('cuda', 0)\nd = torch.device('cpu')\n"
    program = Program.of(ast.parse(code), code.splitlines(True))
    [value] = program.values[("name", 0, "d")]
    assert ("attr", "device") not in value.reads and ("call", "device") in value.reads


FLAGGED = (  # Wan2.1's attention.py: a flag the try sets once the CUDA-only import succeeded
    "import torch\nimport flash_attn_interface\n"
    "try:\n    import {module}\n    HAS_IT = True\nexcept ImportError:\n    HAS_IT = False\n\n"
    "def attend(q):\n    assert q.device.type == 'cuda'\n    if HAS_IT:\n"
    "        return flash_attn_interface.flash_attn_varlen_func(q, q, q)\n    return q\n"
)


@pytest.mark.parametrize(
    ("module", "held"),
    [("flash_attn_interface", False), ("scipy", True)],
    ids=["behind-a-cuda-only-import", "behind-another-import"],
)
def test_cuda_code_behind_its_own_import_flag_is_not_left_for_an_npu_host(module: str, held: bool) -> None:
    """What runs only where a CUDA-only package imported no NPU host reaches: the device check
    before it is migrated. Behind any other package's flag, the CUDA code would be reached."""
    new, result = run(FLAGGED.format(module=module))
    assert ("assert q.device.type == 'npu'" not in new) is held
    assert (("NPU105", 10) in reasons(result)) is held


def test_a_value_bound_only_where_cuda_was_found_is_a_question_too() -> None:
    """Megatron-LM's StragglerDetector (core/utils.py): configure() turns the detector on only
    where CUDA is; elapsed(), another method, reads the GPU's sensors unless it is off. Rewritten,
    the probe would turn it on on an NPU host, and the sensors it reads have no NPU twin."""
    code = (
        "import torch\n\nclass StragglerDetector:\n    def configure(self, enabled):\n"
        "        self._off = True\n        if torch.cuda.is_available():\n"
        "            self._off = not enabled\n\n"
        "    def elapsed(self):\n        if self._off:\n            return 0.0\n"
        "        return torch.cuda.temperature()\n"
    )
    new, result = run(code)
    assert new == code
    assert reasons(result) == {("NPU101", 6): "its value guards CUDA code left"}


def test_a_fix_inside_code_reported_for_a_human_to_rewrite_whole_is_held() -> None:
    """Megatron-LM's training/utils.py: the capability read (NPU121) is the human's to rewrite;
    renaming the call inside it and its device would only move the failure."""
    code = 'import torch\nmajor = torch.cuda.get_device_properties(torch.device("cuda:0")).major\n'
    new, result = run(code)
    assert new == code
    assert reasons(result) == {
        ("NPU101", 2): "it is part of code reported whole",
        ("NPU105", 2): "it is part of code reported whole",
    }


def test_the_values_a_name_reads_come_in_file_order() -> None:
    """A hold names the first value in the file that stays CUDA, whatever order the walk through
    the values took (it follows sets', which the hash seed changes from run to run)."""
    code = "b = 'cuda'\nx = 1\na = b\n"
    program = Program.of(ast.parse(code), code.splitlines(keepends=True))
    walked: list[int] = []
    program_holds._walk(program, frozenset({("name", 0, "a")}), lambda v: walked.append(v.span.line) or True)
    assert walked == [3, 1]  # the walk meets `a = b` first, then what it reads
    values = program_holds._values_read(program, frozenset({("name", 0, "a")}))
    assert [value.span.line for value in values] == [1, 3]
