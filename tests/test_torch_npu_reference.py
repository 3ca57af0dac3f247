"""Rules and emulation are checked against the real torch_npu sources (unpacked by
tests/sources.py fetches them, never imported): every torch_npu / torch.npu name a rule
writes or the emulation offers, and every operator parameter, must exist there."""

from __future__ import annotations

import inspect
import re

import libcst as cst
import pytest

from npu_migrate.engine.imports import renamed
from npu_migrate.engine.kinds import content_of
from npu_migrate.engine.kinds.call import CallMatch
from npu_migrate.engine.kinds.name import NameMatch
from npu_migrate.engine.names import dotted_parts
from npu_migrate.engine.patterns import parse_code, placeholders
from npu_migrate.reference import TorchNpuReference, reference
from npu_migrate.rules.load import load_rules
from tests.sources import torch_npu_sources


@pytest.fixture(scope="module")
def real() -> TorchNpuReference:
    found = reference(torch_npu_sources())
    assert found is not None, f"no torch_npu sources at {torch_npu_sources()}"
    return found


def npu_name(name: str) -> bool:
    return name.startswith(("torch.npu", "torch_npu"))


def written_names() -> set[str]:
    """Every torch.npu / torch_npu name that a built-in rule can write."""
    names = set()
    for rule in load_rules():
        fix = rule.fix
        if fix is None:
            continue
        if fix.rename and isinstance(rule.match, NameMatch | CallMatch):
            patterns = rule.match.name if isinstance(rule.match, NameMatch) else rule.match.call
            for pattern in patterns:
                new = renamed(pattern.removesuffix(".*"), fix.rename)
                if new and npu_name(new):
                    names.add(new)
        if fix.template:
            names.update(n for n in re.findall(r"[A-Za-z_][\w.]*", fix.template) if npu_name(n))
    return names


def test_the_resolver_can_say_no(real: TorchNpuReference) -> None:
    assert real.has("torch.npu.synchronize") and real.has("torch.npu.mstx.range_push")
    assert not real.has("torch.npu.nvtx") and not real.has("torch.npu.mstx.range")
    assert not real.has("torch_npu.npu_flash_attention_that_does_not_exist")


def test_every_name_a_rule_writes_exists(real: TorchNpuReference) -> None:
    names = written_names()
    assert len(names) > 80
    missing = sorted(n for n in names if not real.has(n))
    assert missing == [], f"rules write names torch_npu does not have: {missing}"


def test_template_calls_use_only_real_operator_parameters(real: TorchNpuReference) -> None:
    checked = 0
    for rule in load_rules():
        if not (rule.fix and rule.fix.template) or content_of(rule.match) != "python":
            continue
        tree = parse_code(placeholders(rule.fix.template))
        for call in [n for n in _walk(tree) if isinstance(n, cst.Call)]:
            parts = dotted_parts(call.func)
            if not parts or parts[0] != "torch_npu" or len(parts) != 2:
                continue
            op = real.ops[parts[1]]
            keywords = {a.keyword.value for a in call.args if a.keyword}
            positional = [a for a in call.args if a.keyword is None]
            assert keywords <= set(op.parameters), f"{rule.code}: {keywords - set(op.parameters)}"
            assert len(positional) <= len(op.parameters) and not keywords & set(
                op.parameters[: len(positional)]
            )
            checked += 1
    assert checked >= 4


def _walk(node: cst.CSTNode) -> list[cst.CSTNode]:
    return [node, *(n for child in node.children for n in _walk(child))]


def test_every_name_the_emulation_offers_exists(real: TorchNpuReference) -> None:
    pytest.importorskip("torch")
    from npu_migrate.emulation import amp, npu_module, optim, profiler

    offered = [f"torch.npu.{n}" for n in vars(npu_module) if not n.startswith("_") and _own(npu_module, n)]
    offered += [f"torch.npu.amp.{n}" for n in ("autocast", "GradScaler", "custom_fwd", "custom_bwd")]
    offered += [f"torch_npu.optim.{n}" for n in optim.__all__]
    offered += [f"torch_npu.profiler.{n}" for n in profiler.__all__]
    offered += ["torch.npu.mstx." + n for n in vars(npu_module.mstx) if not n.startswith("_")]
    missing = sorted(n for n in offered if not real.has(n))
    assert missing == [], f"the emulation offers names torch_npu does not have: {missing}"
    assert amp.autocast.__init__.__code__.co_varnames[1:4] == ("enabled", "dtype", "cache_enabled")


def test_the_emulated_profiler_refuses_what_the_real_one_lacks(real: TorchNpuReference) -> None:
    """torch_npu's profile (and its base, _KinetoProfile) define no key_averages() or events():
    the emulated one, torch's underneath, refuses them as the device would."""
    pytest.importorskip("torch")
    import ast

    from npu_migrate.emulation import profiler

    tree = ast.parse((real.root / "profiler" / "profiler.py").read_text(encoding="utf-8"))
    methods = {
        f.name
        for c in tree.body
        if isinstance(c, ast.ClassDef) and c.name in {"profile", "_KinetoProfile"}
        for f in c.body
        if isinstance(f, ast.FunctionDef)
    }
    assert {"start", "stop", "export_chrome_trace"} <= methods  # the classes were found
    refused = {n for n, v in vars(profiler.profile).items() if isinstance(v, profiler._Missing)}
    assert refused == {"key_averages", "events"} and not refused & methods
    with pytest.raises(AttributeError, match="key_averages"):
        profiler.profile().key_averages()


def _own(module: object, name: str) -> bool:
    """Names the module defines for its API (not the modules and helpers it imports)."""
    value = getattr(module, name)
    return not inspect.ismodule(value) and getattr(value, "__module__", module.__name__) in (
        module.__name__,  # type: ignore[attr-defined]
        "torch",
        "torch.cuda",
    )


def test_emulated_operators_have_the_real_signatures(real: TorchNpuReference) -> None:
    pytest.importorskip("torch")
    from npu_migrate.emulation import ops

    for name in ops.__all__:
        assert name in real.ops, f"torch_npu has no operator {name}"
        parameters = tuple(inspect.signature(getattr(ops, name)).parameters)
        assert parameters == real.ops[name].parameters, f"{name}: {parameters} != {real.ops[name].parameters}"


def test_the_runtime_settings_ports_add_are_the_defaults_of_this_torch_npu(real: TorchNpuReference) -> None:
    """Human ports written for older torch_npu open with `torch.npu.set_compile_mode(jit_compile=
    False)` and `torch.npu.config.allow_internal_format = False`. torch_npu 2.13 starts with both
    off: its library logs the defaults it sets (the C++ side, which its Python sources call with
    `_npu_setOption`), so the migration adds neither, and the README says why."""
    library = (real.root / "lib" / "libtorch_npu.so").read_bytes()
    assert b"Set jitCompileInit option to default value: disable" in library
    assert b"Set ALLOW_INTERNAL_FORMAT default value disable" in library
    config = (real.root / "npu" / "npu_config.py").read_text(encoding="utf-8")
    assert '"jitCompile": "enable" if jit_compile else "disable"' in config  # what set_compile_mode sets
    assert '"ALLOW_INTERNAL_FORMAT": "enable" if value else "disable"' in config
