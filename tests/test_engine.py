"""The rewrite guarantees, file by file: minimal edits, one `import torch_npu` where needed,
encodings, BOMs and line endings kept, strings that are not devices left alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from npu_migrate.engine.index import RuleIndex
from npu_migrate.engine.kinds.arguments import CalleeIndex
from npu_migrate.engine.names import name_matches
from npu_migrate.engine.source import migrate_source
from npu_migrate.model import Applicability, ModulePath
from npu_migrate.rules.load import load_rules
from tests.fixture_cases import run_cli

SAFE = frozenset({Applicability.safe})
INDEX = RuleIndex(load_rules())


def migrate(code: str | bytes) -> str:
    data = code.encode() if isinstance(code, str) else code
    result = migrate_source(data, INDEX, SAFE)
    assert result.error is None, result.error
    return (result.new_source or data).decode()


def test_torch_npu_is_imported_once_after_the_torch_import() -> None:
    code = (
        '"""Doc."""\nfrom __future__ import annotations\nimport os\nimport torch\nimport numpy as np\n'
        "\nx.cuda()\ny.cuda()\n"
    )
    assert migrate(code) == (
        '"""Doc."""\nfrom __future__ import annotations\nimport os\nimport torch\nimport torch_npu\n'
        "import numpy as np\n\nx.npu()\ny.npu()\n"
    )


def test_an_existing_torch_npu_import_is_reused() -> None:
    code = "import torch\nimport torch_npu\nx.cuda()\n"
    assert migrate(code) == "import torch\nimport torch_npu\nx.npu()\n"


def test_no_imports_at_all_puts_it_after_docstring_and_future() -> None:
    code = '"""Doc."""\nfrom __future__ import annotations\ndef f(m):\n    return m.cuda()\n'
    assert (
        migrate(code)
        == '"""Doc."""\nfrom __future__ import annotations\nimport torch_npu\ndef f(m):\n    return m.npu()\n'
    )


def test_files_that_need_no_npu_api_get_no_import() -> None:
    code = 'import os\nos.environ["CUDA_VISIBLE_DEVICES"] = "0"\nprint("cuda")\n'
    assert migrate(code) == 'import os\nos.environ["ASCEND_RT_VISIBLE_DEVICES"] = "0"\nprint("cuda")\n'


@pytest.mark.parametrize(
    "code",
    [
        "import torch\nx = t.to(non_blocking=True)\n",
        "import torch\nx = t.to(get_device(), non_blocking=True)\n",
        "import torch\nm.to_empty(device=dev)\n",
        'import torch\nprint("cuda:0 is busy")\nlog.info(f"cuda:{rank}")\n',
        'import torch\n"""Runs on cuda."""\n',
        "import torch\ndef f(cuda=True):\n    return g(cuda=cuda)\n",
        "import torch\nclass cuda:\n    pass\n",
    ],
)
def test_code_that_is_not_a_cuda_touchpoint_is_left_alone(code: str) -> None:
    result = migrate_source(code.encode(), INDEX, SAFE)
    assert result.new_source is None and result.findings == []


@pytest.mark.parametrize(
    ("code", "rule"),
    [
        ('import torch\nname = "cuda"\n', "NPU108"),
        ('KINDS = ("cpu", "gpu")\n', "NPU108"),
        ('kind = "NCCL" if has_gpu else "GLOO"\n', "NPU203"),
        ("import torch\nref = t.cuda\n", "NPU113"),
        ("y = x.cuda(*args, **kwargs)\n", "NPU112"),
    ],
)
def test_a_trace_whose_use_cannot_be_seen_is_reported_not_rewritten(code: str, rule: str) -> None:
    """Nothing silent: a CUDA trace no rule can place still carries a finding."""
    result = migrate_source(code.encode(), INDEX, SAFE)
    assert result.new_source is None
    assert [f.rule.code for f in result.findings] == [rule]


def test_rewrites_are_minimal_and_keep_keywords_and_comments() -> None:
    code = (
        "import torch\n"
        "dev = torch.device(type='cuda', index=rank)  # keyword stays\n"
        "y = (model(x)\n     .cuda(non_blocking=True))  # split\n"
        "z = torch.empty(4, device=f'cuda:{rank}')\n"
    )
    assert migrate(code) == (
        "import torch\nimport torch_npu\n"
        "dev = torch.device(type='npu', index=rank)  # keyword stays\n"
        "y = (model(x)\n     .npu(non_blocking=True))  # split\n"
        "z = torch.empty(4, device=f'npu:{rank}')\n"
    )


def test_unknown_torch_cuda_names_are_reported_not_renamed() -> None:
    code = "import torch\ntorch.cuda.jiterator._create_jit_fn(src)\n"
    result = migrate_source(code.encode(), INDEX, SAFE)
    assert result.new_source is None
    assert [f.rule.code for f in result.findings] == ["NPU102"]


def test_the_cuda_module_imported_from_torch_becomes_torch_npus() -> None:
    code = "from torch import cuda\nimport torch.cuda\ncuda.synchronize()\nok = hasattr(cuda, 'x')\n"
    assert migrate(code) == (  # `import torch.cuda` binds `torch`: its rewrite must too
        "from torch_npu import npu\nimport torch\nimport torch_npu\n"
        "npu.synchronize()\nok = hasattr(npu, 'x')\n"
    )


def test_aliases_and_nested_imports_resolve() -> None:
    """torch_npu is imported where the file imports torch: a module that imports torch only in a
    function still imports without torch."""
    code = "def f():\n    import torch.distributed as d\n    d.init_process_group(backend='nccl')\n"
    assert migrate(code) == (
        "def f():\n    import torch.distributed as d\n    import torch_npu\n"
        "    d.init_process_group(backend='hccl')\n"
    )


def test_bom_crlf_and_latin1_are_kept() -> None:
    bom = b"\xef\xbb\xbfimport torch\r\nx.cuda()\r\n"
    assert (
        migrate_source(bom, INDEX, SAFE).new_source
        == b"\xef\xbb\xbfimport torch\r\nimport torch_npu\r\nx.npu()\r\n"
    )
    latin = "# -*- coding: latin-1 -*-\nimport torch\ns = 'é'\nx.cuda()\n".encode("latin-1")
    new = migrate_source(latin, INDEX, SAFE).new_source
    assert new == "# -*- coding: latin-1 -*-\nimport torch\nimport torch_npu\ns = 'é'\nx.npu()\n".encode(
        "latin-1"
    )


def test_unsafe_fixes_are_reported_but_not_applied_by_default() -> None:
    code = "import torch\nstate = torch.load(path)\n"
    result = migrate_source(code.encode(), INDEX, SAFE)
    assert result.new_source is None
    [finding] = result.findings
    assert (finding.rule.code, finding.applied) == ("NPU107", False)
    assert finding.replacement == 'torch.load(path, map_location="cpu")'


def test_files_without_any_trigger_are_not_parsed() -> None:
    result = migrate_source(b"def f(:\n", INDEX, SAFE)  # broken, but nothing to migrate
    assert result.error is None and result.findings == []


def test_the_prefilter_skips_prose_but_not_any_spelling_of_a_name() -> None:
    from npu_migrate.prefilter import tokens

    assert not INDEX.may_match("import torch\n# load the model, then compile it\nx = load(f)\n")
    assert INDEX.may_match("import torch\nstate = torch.load(path)\n")
    assert INDEX.may_match(
        "from torch import (\n    zeros,\n    float64,\n)\nzeros(2, dtype=float64, device=d)\n"
    )
    assert {".load", ".save"} <= tokens("from torch import save, \\\n    load\n")


def test_a_string_rule_whose_regex_is_one_text_needs_that_text_in_the_file() -> None:
    """A file that never spells "flash_attention_2" cannot hold that literal: the quick byte test
    says so (NPU844's hold words are looked for only where it passes); any other regex passes."""
    from npu_migrate.prefilter import Prefilter

    literal = Prefilter()
    literal.need_regex("^flash_attention_2$")
    assert literal.may_spell(b'model(attn_implementation="flash_attention_2")')
    assert not literal.may_spell(b'model(attn_implementation="sdpa")')
    pattern = Prefilter()
    pattern.need_regex("^flash_attention_[23]$")
    assert pattern.may_spell(b"x = 1")


def test_findings_inside_code_a_template_replaced_go_with_it() -> None:
    code = "import torch\nbf16 = torch.cuda.get_device_capability()[0] >= 8\n"
    result = migrate_source(code.encode(), INDEX, frozenset({Applicability.safe, Applicability.unsafe}))
    assert result.new_source == b"import torch\nimport torch_npu\nbf16 = torch.npu.is_bf16_supported()\n"
    assert [(f.rule.code, f.applied) for f in result.findings] == [("NPU115", True)]


def test_findings_carried_into_a_template_stay() -> None:
    code = 'import torch.nn.functional as F\ny = F.rms_norm(x, (8,), weights["gpu"], 1e-5)\n'
    result = migrate_source(code.encode(), INDEX, frozenset({Applicability.safe, Applicability.unsafe}))
    assert b'torch_npu.npu_rms_norm(x, weights["gpu"], epsilon=1e-5)[0]' in (result.new_source or b"")
    assert "NPU108" in {f.rule.code for f in result.findings}


def test_a_helper_is_added_once_after_the_imports() -> None:
    code = (
        "import torch\nimport torch.nn.functional as F\nfrom models import Block\n"
        "from .layers import Norm\n\n\n"
        "def a(x):\n    q = k = v = x.view(2, 4, 8, 16)\n"
        "    return F.scaled_dot_product_attention(q, k, v, is_causal=True)\n\n\n"
        "def b(x):\n    q = k = v = x.view(2, 4, 8, 16)\n"
        "    return F.scaled_dot_product_attention(q, k, v, is_causal=True)\n"
    )
    unsafe = frozenset({Applicability.safe, Applicability.unsafe})
    result = migrate_source(code.encode(), INDEX, unsafe)
    new = (result.new_source or b"").decode()
    assert new.count("def npu_causal_mask(device):") == 1
    # after the relative import too (transformers' modeling files end their imports with them)
    assert new.index("from .layers import Norm") < new.index("@functools.lru_cache") < new.index("def a(")
    assert new.count("atten_mask=npu_causal_mask(q.device)") == 2
    line = dict((name, line) for line, name in result.added_helpers)["npu_causal_mask"]
    assert new.splitlines()[line - 1] == "@functools.lru_cache(maxsize=None)"
    assert migrate_source(new.encode(), INDEX, unsafe).new_source is None  # a second run adds nothing
    compile(new, "<migrated>", "exec")


def migrate_in(package: str, code: str, module: str = "") -> tuple[str, list[str]]:
    """The file's new text and its findings' labels, as the module `module` of `package`."""
    result = migrate_source(code.encode(), INDEX, SAFE, ModulePath(module or f"{package}.m", package))
    assert result.error is None, result.error
    labels = [
        f"{f.line}:{f.rule.code}:{'held' if f.held else 'applied' if f.applied else 'report'}"
        for f in result.findings
    ]
    return (result.new_source or code.encode()).decode(), labels


def test_relative_imports_resolve_through_the_files_package() -> None:
    code = (
        "from ...utils import is_torch_cuda_available, logging\n\nif is_torch_cuda_available():\n    x = 1\n"
    )
    new, labels = migrate_in("transformers.models.llama", code)
    assert (
        new
        == "from ...utils import is_torch_npu_available, logging\n\nif is_torch_npu_available():\n    x = 1\n"
    )
    assert labels == ["1:NPU114:applied", "3:NPU114:applied"]


def test_relative_imports_outside_a_known_package_are_left_alone() -> None:
    code = "from ...utils import is_torch_cuda_available\n\nif is_torch_cuda_available():\n    x = 1\n"
    assert migrate_in("", code) == (code, [])
    assert migrate_in("transformers", code) == (code, [])  # two levels above a top-level package


def test_a_renamed_import_stays_bound_for_a_use_whose_fix_is_held() -> None:
    """The use that guards CUDA-only code keeps the old name, so the import must keep binding it
    (before, it was renamed away: a NameError at that line)."""
    code = (
        "import torch\n"
        "from transformers.utils import is_torch_cuda_available\n"
        "def capability():\n"
        "    if is_torch_cuda_available():\n"
        "        return torch.cuda.get_device_capability()\n"
        "def other():\n"
        "    return is_torch_cuda_available()\n"
    )
    new, labels = migrate_in("", code)
    assert new == code.replace(
        "import is_torch_cuda_available\n", "import is_torch_cuda_available, is_torch_npu_available\n"
    ).replace("return is_torch_cuda_available()", "return is_torch_npu_available()")
    assert labels == ["2:NPU114:applied", "4:NPU114:held", "5:NPU106:report", "7:NPU114:applied"]
    again, labels = migrate_in("", new)  # a scan of the migrated file: the import is held too
    assert again == new
    assert labels == ["2:NPU114:held", "4:NPU114:held", "5:NPU106:report"]


def test_a_file_that_keeps_a_path_for_the_npu_is_left_dual() -> None:
    """transformers-style code that asks is_torch_npu_available() beside CUDA: a rewrite for the
    NPU would break its GPU path (`other()` would answer False on a GPU host)."""
    code = (
        "from transformers.utils import is_torch_cuda_available, is_torch_npu_available\n"
        "def pick():\n"
        "    if is_torch_cuda_available():\n"
        '        return "a"\n'
        "    elif is_torch_npu_available():\n"
        '        return "b"\n'
        "def other():\n"
        "    return is_torch_cuda_available()\n"
    )
    new, labels = migrate_in("", code)
    assert new == code
    assert labels == ["1:NPU114:held", "3:NPU114:held", "8:NPU114:held"]


def test_an_imported_name_the_file_only_re_exports_is_left_as_it_is() -> None:
    code = "from .import_utils import is_torch_cuda_available, is_torch_npu_available\n"
    assert migrate_in("transformers.utils", code) == (code, ["1:NPU114:held"])


def test_a_relative_import_whose_name_moves_module_is_written_absolute() -> None:
    new, labels = migrate_in("torch.utils", "from ..cuda import synchronize\nsynchronize()\n")
    assert new == "from torch_npu.npu import synchronize\nimport torch_npu\nsynchronize()\n"
    assert labels == ["1:NPU101:applied"]


def test_a_relative_import_a_template_frees_is_dropped() -> None:
    code = "from ..optimizers import FusedAdam\nopt = FusedAdam(params, lr=1e-3, adam_w_mode=True)\n"
    result = migrate_source(
        code.encode(), INDEX, frozenset(Applicability), ModulePath("apex.contrib.m", "apex.contrib")
    )
    assert (
        result.new_source
        == b"import torch\nopt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.0, fused=True)\n"
    )
    assert result.removed_imports == [(1, "apex.optimizers.FusedAdam")]


def test_a_renamed_import_keeps_the_statements_layout() -> None:
    code = (
        "from transformers.utils import (\n    logging,\n    is_torch_cuda_available,\n)\n"
        "x = is_torch_cuda_available()\n"
    )
    assert migrate(code) == code.replace("cuda", "npu")
    held = (
        "from transformers.utils import (\n    is_torch_cuda_available,\n)\nimport torch\n"
        "if is_torch_cuda_available():\n    a = torch.cuda.get_device_capability()\n"
        "b = is_torch_cuda_available()\n"
    )
    assert migrate(held).startswith(
        "from transformers.utils import (\n    is_torch_cuda_available,\n    is_torch_npu_available,\n)\n"
    )


def test_a_modules_own_definitions_resolve_as_its_names() -> None:
    """A vendored library calls its helpers by their bare names: they are `<module>.<name>`."""
    code = (
        "def is_torch_cuda_available():\n    return True\n\n"
        "def is_torch_npu_available():\n    return False\n\n"
        "def has_mamba():\n    return is_torch_cuda_available()\n"
    )
    new, labels = migrate_in("transformers.utils", code, "transformers.utils.import_utils")
    assert labels == ["8:NPU114:held"]  # found as transformers' own function (mylib's is not)...
    assert new == code  # ...and left: a module that defines is_torch_npu_available() is a device dispatch
    assert migrate_in("mylib", code, "mylib.helpers") == (code, [])


CALLEES = [["torch.cuda.set_device"], ["torch.cuda.*"], [".to"], ["*"], ["os.environ.get", ".get"], ["torch"]]


@pytest.mark.parametrize(
    ("qualified", "method"),
    [
        ("torch.cuda.set_device", "set_device"),
        ("torch.cuda", "cuda"),
        ("torch.cudax.y", "y"),
        ("torch.cuda.amp.autocast", "autocast"),
        (None, "to"),
        ("os.environ.get", "get"),
        (None, None),
        ("torch", None),
    ],
)
def test_a_callee_index_finds_what_each_callee_names(qualified: str | None, method: str | None) -> None:
    """The lookup finds, in order, the items whose callees a call's callee is: a qualified name,
    strictly under `a.b.*`, a `.method`, any call for `*`."""

    def named(callees: list[str]) -> bool:
        return "*" in callees or f".{method}" in callees or name_matches(qualified, callees)

    index = CalleeIndex((callees, i) for i, callees in enumerate(CALLEES))
    assert index.of(qualified, method) == [i for i, callees in enumerate(CALLEES) if named(callees)]


FLAX_ROPE = '''"""transformers' modeling_flax_llama.py: the Flax copy of the PyTorch model beside it."""
import jax.numpy as jnp


def rotate_half(tensor):
    half = tensor.shape[-1] // 2
    return jnp.concatenate((-tensor[..., half:], tensor[..., :half]), axis=-1)


def apply_rotary_pos_emb(tensor, sin_pos, cos_pos):
    return (tensor * cos_pos) + (rotate_half(tensor) * sin_pos)
'''


def test_a_fused_swap_is_not_made_in_another_frameworks_copy_of_the_model(tmp_path: Path) -> None:
    """transformers ships Flax and TensorFlow copies of its PyTorch models; their RoPE reads as
    the PyTorch one does, on JAX arrays that torch_npu's operators do not take. `apply --unsafe`
    swaps the PyTorch file's RoPE for npu_rotary_mul and leaves the Flax file byte-identical,
    with no finding there."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "modeling_flax_llama.py").write_text(FLAX_ROPE)
    torch_copy = (
        FLAX_ROPE.replace("import jax.numpy as jnp", "import torch")
        .replace("jnp.concatenate(", "torch.cat(")
        .replace("axis=-1", "dim=-1")
    )
    (source / "modeling_llama.py").write_text(torch_copy)
    scanned = run_cli("scan", str(source), "--format", "json", "--no-cache", cwd=tmp_path)
    files = {Path(f["file"]).name for f in json.loads(scanned.stdout)["findings"]}
    assert files == {"modeling_llama.py"}, scanned.stdout
    out = tmp_path / "out"
    run_cli("apply", str(source), "--unsafe", "--out", str(out), "--no-change-list", cwd=tmp_path)
    assert (out / "modeling_flax_llama.py").read_bytes() == (source / "modeling_flax_llama.py").read_bytes()
    assert "torch_npu.npu_rotary_mul(" in (out / "modeling_llama.py").read_text()
