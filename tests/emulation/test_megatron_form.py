"""Megatron-LM's CUDA beyond `torch.cuda`, on the fixture written in its form
(fixtures/megatron): its RNG tracker moves to the NPU whole (getter, setter and the lazy queue
the setter goes through), its optimizers' type strings follow the NPU's `Tensor.type()`, its
launch script follows the backend choice the rewrite changed; and the emulation has what the
migrated code calls (`torch.npu.random`, `_lazy_call`, `default_generators`, the NPU's type
names, `npu_scaled_masked_softmax`)."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest

from tests.fixture_cases import FIXTURES, run_cli
from tests.sources import MEGATRON_CORE, fetch

torch = pytest.importorskip("torch")

from npu_migrate.emulation import ops  # noqa: E402

SOURCE = FIXTURES / "megatron" / "src"


def test_the_migrated_launch_script_trains_with_an_rng_tracker_that_restores_and_forks_exactly(
    tmp_path: Path,
) -> None:
    """The migrated `train.sh` (torchrun, flags in arrays, `--distributed-backend hccl`) under
    `run --emulate`: argparse takes the backend, the tracker's fork switches generators and comes
    back, a restored state draws the same numbers again, and bf16 parameters are classified by
    their NPU type strings (pretrain.py asserts each)."""
    migrated = tmp_path / "migrated"
    applied = run_cli("apply", SOURCE, "--out", migrated, "--change-list", tmp_path / "c.csv", cwd=tmp_path)
    assert applied.returncode == 1, applied.stderr  # manual findings remain (the CUDA extensions)
    random = (migrated / "core" / "random.py").read_text()
    assert "from torch_npu.npu import _lazy_call, _lazy_init" in random and "torch.cuda" not in random
    assert "--distributed-backend hccl" in (migrated / "train.sh").read_text()
    ran = run_cli("run", "--emulate", "./train.sh", cwd=migrated)
    assert ran.returncode == 0, ran.stderr
    assert "backend=hccl rng restores and forks exactly; 1 main param(s)" in ran.stdout


def test_a_training_loop_on_the_real_megatron_core_trains_on_two_tensor_parallel_ranks(
    tmp_path: Path,
) -> None:
    """megatron-core 0.12.1's own sources (the PyPI sdist, pinned) and a user's loop on them
    (fixtures/megatron/src/mcore_train_loop.py), migrated together and run under `run --emulate
    torchrun --nproc_per_node 2`: the RNG tracker keeps the default draws equal across ranks, its
    own per tensor-parallel rank, and repeats a restored state (the build before this one left
    Megatron's setter on CUDA's lazy queue: the first and last were False); Megatron's bf16
    optimizer takes the NPU's parameters (it raised TypeError); full recomputation reproduces the
    gradients; the loss over one batch falls on both ranks alike."""
    source = tmp_path / "src"
    shutil.copytree(fetch(MEGATRON_CORE), source / "megatron")
    shutil.copy(SOURCE / "mcore_train_loop.py", source)
    migrated = tmp_path / "migrated"
    run_cli("apply", source, "--out", migrated, "--change-list", tmp_path / "c.csv", cwd=tmp_path)
    ran = run_cli(
        "run", "--emulate", "torchrun", "--nproc_per_node", "2", "mcore_train_loop.py", cwd=migrated
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    rng = "default draws agree across ranks: True; tracker draws differ per tensor-parallel rank: True; "
    for rank in (0, 1):
        assert f"rank {rank}: {rng}restored states repeat: True" in ran.stdout, ran.stdout
        assert f"rank {rank}: recomputed gradients equal: True" in ran.stdout, ran.stdout
    losses = {
        rank: [float(x) for x in re.findall(rf"rank {rank} step \d+ loss ([-\d.e+]+)", ran.stdout)]
        for rank in (0, 1)
    }
    assert len(losses[0]) == 4 and losses[0] == losses[1], losses
    assert all(math.isfinite(x) for x in losses[0]) and losses[0][-1] < losses[0][0], losses


@pytest.fixture(scope="module")
def unsafe_core(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """megatron-core 0.12.1 (the PyPI sdist, pinned) and the user's loop on it, after `apply
    --unsafe`."""
    top = tmp_path_factory.mktemp("unsafe-core")
    source = top / "src"
    shutil.copytree(fetch(MEGATRON_CORE), source / "megatron")
    shutil.copy(SOURCE / "mcore_train_loop.py", source)
    migrated = top / "migrated"
    run_cli("apply", source, "--unsafe", "--out", migrated, "--change-list", top / "c.csv", cwd=top)
    return migrated


def test_the_real_megatron_core_trains_with_its_fusions_on_after_apply_unsafe(unsafe_core: Path) -> None:
    """megatron-core 0.12.1 with masked-softmax and gradient-accumulation fusion on (Megatron's
    training defaults; CUDA kernels in the original, ModuleNotFoundError after a safe apply),
    migrated with `--unsafe`, on two tensor-parallel ranks: its softmax runs on
    npu_scaled_masked_softmax, its core attention on npu_fusion_attention and its weight
    gradients on _npu_matmul_add_fp32, the RNG tracker and recomputation hold as without them,
    and the loss falls alike on both ranks."""
    migrated = unsafe_core
    assert "npu_fused_softmax(" in (migrated / "megatron/core/fusions/fused_softmax.py").read_text()
    attention = (migrated / "megatron/core/transformer/dot_product_attention.py").read_text()
    assert "context = npu_core_attention(query, key, value, attention_mask," in attention
    ran = run_cli(
        "run", "--emulate", "torchrun", "--nproc_per_node=2", "mcore_train_loop.py", "--fusions", cwd=migrated
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    for rank in (0, 1):
        assert f"rank {rank}: recomputed gradients equal: True" in ran.stdout, ran.stdout
        assert f"rank {rank}: default draws agree across ranks: True" in ran.stdout, ran.stdout
    site = r"^  megatron/core/transformer/dot_product_attention\.py:\d+: (.*)$"
    guarded = re.findall(site, ran.stderr, re.M)
    assert len(guarded) == 1 and re.fullmatch(r"fused [1-9]\d*", guarded[0]), ran.stderr[-3000:]
    losses = [float(x) for x in re.findall(r"rank 0 step \d+ loss ([-\d.e+]+)", ran.stdout)]
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses) and losses[-1] < losses[0], losses


def test_the_fused_kernels_run_as_npu_operators_after_apply_unsafe(tmp_path: Path) -> None:
    """`apply --unsafe` puts Megatron's fused-softmax autograd functions and its gradient-
    accumulation GEMM on torch_npu's operators, and their CUDA modules' imports go (so Megatron's
    "is the fusion available" checks hold). Under `run --emulate`, forward and backward agree with
    Megatron's unfused softmax; the NPU kernels run where their shape limits hold (counted by the
    check), and the helper's torch path takes a shape they refuse (the emulated operator would
    raise there); the weight gradient lands in `main_grad`. Its MoE experts' grouped GEMMs run on
    `npu_grouped_matmul` forward and backward (weights' gradient on `npu_grouped_matmul_add_`) in
    bf16, and expert by expert in fp32, which the gradient operator does not take; both match the
    experts computed one by one, gradients included. Megatron 3.0's gradient clipping, apex's
    `amp_C` norm and scale called directly, clips on torch's foreach operators."""
    migrated = tmp_path / "migrated"
    run_cli("apply", SOURCE, "--unsafe", "--out", migrated, "--change-list", tmp_path / "c.csv", cwd=tmp_path)
    for name in ("fused_softmax.py", "layers.py"):
        left = re.findall(r"^\s*import \w+_cuda|\w+_cuda\.\w+", (migrated / "core" / name).read_text(), re.M)
        assert not left, (name, left)
    experts = (migrated / "megatron" / "core" / "transformer" / "moe" / "experts.py").read_text()
    assert "gg." not in experts and "grouped_gemm_util" not in experts, experts
    clip = (migrated / "core" / "clip_grads.py").read_text()
    assert not re.findall(r"^import amp_C|^from apex|multi_tensor_applier\(", clip, re.M), clip
    (migrated / "check_fused.py").write_text(FUSED_KERNELS)
    ran = run_cli("run", "--emulate", "check_fused.py", cwd=migrated)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.split() == [
        "(2,4,64,64):", "kernel", "forward", "1", "backward", "1",
        "(2,4,20,20):", "kernel", "forward", "0", "backward", "0",
        "causal:", "kernel", "forward", "1", "backward", "1",
        "main_grad:", "kernel", "1", "ok",
        "experts", "bfloat16:", "kernel", "4", "add", "2", "ok",
        "experts", "float32:", "kernel", "0", "add", "0", "ok",
        "clipped", "1.0",
    ], ran.stdout  # fmt: skip


FUSED_KERNELS = r"""
import torch
import torch_npu

from core.fused_softmax import ScaledMaskedSoftmax, ScaledUpperTriangMaskedSoftmax, is_kernel_available
from core.layers import ColumnParallelLinear, accumulate_weight_grad
from megatron.core.transformer.moe.experts import GroupedMLP
from core.clip_grads import clip_grad_norm_fp32
import torch.nn.functional as F

calls = {}
OPERATORS = (
    "npu_scaled_masked_softmax", "npu_scaled_masked_softmax_backward", "_npu_matmul_add_fp32",
    "npu_grouped_matmul", "npu_grouped_matmul_add_",
)
for name in OPERATORS:
    def counted(*args, _name=name, _op=getattr(torch_npu, name), **kwargs):
        calls[_name] = calls.get(_name, 0) + 1
        return _op(*args, **kwargs)
    setattr(torch_npu, name, counted)


def unfused(x, mask, scale):
    return torch.softmax((x.float() * scale).masked_fill(mask, -10000.0), dim=-1).to(x.dtype)


def check(label, fused, reference, x):
    calls.clear()
    x = x.detach().requires_grad_()
    plain = x.detach().clone().requires_grad_()
    out, want = fused(x), reference(plain)
    grad = torch.randn_like(out)
    out.backward(grad)
    want.backward(grad)
    assert x.device.type == "npu" and x.grad.device.type == "npu"
    torch.testing.assert_close(out.float(), want.float(), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(x.grad.float(), plain.grad.float(), atol=2e-2, rtol=2e-2)
    forward = calls.get("npu_scaled_masked_softmax", 0)
    backward = calls.get("npu_scaled_masked_softmax_backward", 0)
    print(f"{label}: kernel forward {forward} backward {backward}")


torch.manual_seed(0)
assert is_kernel_available(None, 2, 4, 64, 64)
for shape in [(2, 4, 64, 64), (2, 4, 20, 20)]:
    x = torch.randn(shape, device="npu", dtype=torch.bfloat16)
    mask = torch.rand(shape[0], 1, *shape[2:], device="npu") > 0.7
    fused = lambda t: ScaledMaskedSoftmax.apply(t, mask, 0.125)
    check(str(shape).replace(" ", ""), fused, lambda t: unfused(t, mask, 0.125), x)
causal = torch.ones(64, 64, dtype=torch.bool, device="npu").triu(1)
x = torch.randn(8, 64, 64, device="npu", dtype=torch.bfloat16)
check("causal", lambda t: ScaledUpperTriangMaskedSoftmax.apply(t, 0.5), lambda t: unfused(t, causal, 0.5), x)

calls.clear()
layer = ColumnParallelLinear(16, 8, gradient_accumulation_fusion=True)
layer.weight.main_grad = torch.ones(8, 16, device="npu")
total_input = torch.randn(32, 16, device="npu", dtype=torch.bfloat16)
grad_output = torch.randn(32, 8, device="npu", dtype=torch.bfloat16)
accumulate_weight_grad(total_input, grad_output, layer.weight)
want = 1 + grad_output.float().t() @ total_input.float()
torch.testing.assert_close(layer.weight.main_grad, want)
print(f"main_grad: kernel {calls.get('_npu_matmul_add_fp32', 0)} ok")

for dtype in (torch.bfloat16, torch.float32):
    calls.clear()
    experts = GroupedMLP(3, 64, 32, dtype=dtype).to("npu")
    tokens_per_expert = torch.tensor([5, 0, 11])  # on the host, as Megatron's dispatchers give them
    x = torch.randn(16, 64, device="npu", dtype=dtype, requires_grad=True)
    out = experts(x, tokens_per_expert)
    out.backward(torch.ones_like(out))
    reference, plain = GroupedMLP(3, 64, 32, dtype=torch.float32), x.detach().float().requires_grad_()
    reference.load_state_dict({k: v.float() for k, v in experts.state_dict().items()})
    w1 = reference.weight1.view(3, 64, 32)
    w2 = reference.weight2.view(3, 32, 64)
    rows = plain.split([5, 0, 11])
    want = torch.cat([F.silu(r @ w1[i]) @ w2[i] for i, r in enumerate(rows)])
    want.backward(torch.ones_like(want))
    torch.testing.assert_close(out.float(), want, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(x.grad.float(), plain.grad, atol=2e-2, rtol=2e-2)
    for name in ("weight1", "weight2"):
        got, expected = getattr(experts, name).grad, getattr(reference, name).grad
        assert got is not None and got.device.type == "npu"
        torch.testing.assert_close(got.float().cpu(), expected, atol=2e-2, rtol=2e-2)
    gemms, adds = calls.get("npu_grouped_matmul", 0), calls.get("npu_grouped_matmul_add_", 0)
    print(f"experts {str(dtype).removeprefix('torch.')}: kernel {gemms} add {adds} ok")

grads = [torch.randn(8, 4, device="npu", dtype=torch.bfloat16) for _ in range(3)]
before = [g.float() for g in grads]
total = torch.linalg.vector_norm(torch.cat([g.flatten() for g in before]))
norm = clip_grad_norm_fp32(grads, 1.0)
assert abs(norm - total.item()) < 1e-4 * total.item() and all(g.device.type == "npu" for g in grads)
for g, b in zip(grads, before):
    torch.testing.assert_close(g.float(), b / (total + 1e-6), atol=1e-2, rtol=1e-2)
print("clipped", round(torch.linalg.vector_norm(torch.cat([g.float().flatten() for g in grads])).item(), 2))
"""


def test_megatron_core_attention_runs_as_one_fused_call_and_matches_its_statements(
    unsafe_core: Path, tmp_path: Path
) -> None:
    """megatron-core's DotProductAttention after `apply --unsafe` (NPU976), on the emulated NPU:
    forward and the gradients of q, k and v agree with the statements it replaced (the guard's
    `else`, forced for the reference) in fp32 closely and in bf16 as close as those statements'
    own bf16 run is to their fp32 one (doubled): GPT's causal mask given, the causal mask the
    softmax builds when given none (sparse mode 2), a padding mask per batch, GQA's repeated key
    heads, and the scale split by apply_query_key_layer_scaling. A key-padding mask [b, 1, 1, sk]
    that the kernel does not take runs the statements, with the guard's reason."""
    script = tmp_path / "check_core_attention.py"
    script.write_text(CORE_ATTENTION.replace("STORE", (tmp_path / "store").as_posix()))
    ran = run_cli("run", "--emulate", script, cwd=unsafe_core)
    assert ran.returncode == 0, ran.stderr[-3000:]
    lines = ran.stdout.strip().splitlines()
    assert lines == [
        f"{case} {dtype}: {outcome} ok"
        for case, outcome in [
            ("causal-mask", "fused"),
            ("causal-built", "fused"),
            ("padding", "fused"),
            ("gqa", "fused"),
            ("layer-scaling", "fused"),
            ("key-padding", "a torch.bool mask of shape (2, 1, 1, 64), not boolean [b or 1, 1, sq, sk]"),
        ]
        for dtype in ("float32", "bfloat16")
    ], ran.stdout


CORE_ATTENTION = r"""
import torch
import torch_npu
from megatron.core import parallel_state
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
from megatron.core.transformer import dot_product_attention as core
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.transformer_config import TransformerConfig

torch.distributed.init_process_group("hccl", init_method="file://STORE", rank=0, world_size=1)
parallel_state.initialize_model_parallel(1, 1)
model_parallel_cuda_manual_seed(0)
GUARD, S, B = core.why_not_npu_core_attention, 64, 2
said = []


def attention(mask_type, dtype, groups=4, scaling=False):
    config = TransformerConfig(
        num_layers=1, hidden_size=64, num_attention_heads=4, num_query_groups=groups, kv_channels=16,
        attention_dropout=0.0, apply_query_key_layer_scaling=scaling, bf16=dtype == torch.bfloat16,
        params_dtype=dtype,
    )
    return core.DotProductAttention(config, layer_number=3, attn_mask_type=mask_type, attention_type="self")


def run(case, dtype, fused):
    mask_type, groups, scaling, mask = case
    core.why_not_npu_core_attention = (lambda *a: said.append(GUARD(*a)) or said[-1]) if fused else (
        lambda *a: "the reference")
    torch.manual_seed(0)
    q = torch.randn(S, B, 4, 16, device="npu")
    k, v = (torch.randn(S, B, groups, 16, device="npu") for _ in range(2))
    q, k, v = (t.to(dtype).requires_grad_() for t in (q, k, v))
    out = attention(mask_type, dtype, groups, scaling)(q, k, v, mask)
    out.float().pow(2).sum().backward()
    return [t.detach().float().cpu() for t in (out, q.grad, k.grad, v.grad)]


causal = torch.ones(S, S, dtype=torch.bool, device="npu").triu(1)
padding = (torch.rand(B, 1, S, S, device="npu") > 0.7) & ~torch.eye(S, dtype=torch.bool, device="npu")
keys = torch.zeros(B, 1, 1, S, dtype=torch.bool, device="npu")
keys[1, ..., 50:] = True
CASES = {
    "causal-mask": (AttnMaskType.causal, 4, False, causal[None, None]),
    "causal-built": (AttnMaskType.causal, 4, False, None),
    "padding": (AttnMaskType.padding, 4, False, padding),
    "gqa": (AttnMaskType.causal, 2, False, causal[None, None]),
    "layer-scaling": (AttnMaskType.causal, 4, True, causal[None, None]),
    "key-padding": (AttnMaskType.padding, 4, False, keys),
}
for name, case in CASES.items():
    truth = run(case, torch.float32, fused=False)
    for dtype in (torch.float32, torch.bfloat16):
        said.clear()
        got = run(case, dtype, fused=True)
        if dtype == torch.float32:
            for a, b in zip(got, truth, strict=True):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
        else:
            plain = run(case, dtype, fused=False)
            for a, b, c in zip(got, truth, plain, strict=True):
                tolerance = max(2**-6 * b.abs().max().item(), 2 * (c - b).abs().max().item())
                torch.testing.assert_close(a, b, rtol=2**-6, atol=tolerance)
        assert len(set(said)) == 1, said
        print(f"{name} {str(dtype).removeprefix('torch.')}: {said[0] or 'fused'} ok")
"""


def test_every_cuda_extension_and_transformer_engine_use_is_reported_at_its_line() -> None:
    scanned = run_cli("scan", "src", "--format", "json", cwd=SOURCE.parent)
    found = {(Path(f["file"]).name, f["line"], f["code"]) for f in json.loads(scanned.stdout)["findings"]}
    for expected in [
        ("fused_softmax.py", 33, "NPU846"),  # import scaled_masked_softmax_cuda, inside forward
        ("fused_softmax.py", 36, "NPU962"),  # its call, an NPU kernel with --unsafe
        ("fused_softmax.py", 15, "NPU963"),  # the causal kernel
        ("fused_softmax.py", 45, "NPU965"),  # a backward
        ("fused_softmax.py", 55, "NPU966"),  # the launch query
        ("layers.py", 6, "NPU847"),  # import fused_weight_gradient_mlp_cuda in a try
        ("layers.py", 30, "NPU967"),
        ("layers.py", 32, "NPU967"),
        ("optimizer.py", 7, "NPU848"),  # import amp_C
        ("optimizer.py", 10, "NPU848"),
        ("parallel_state.py", 8, "NPU204"),  # ProcessGroupNCCL.Options()
        ("random.py", 10, "NPU851"),  # import transformer_engine
        ("train.sh", 10, "NPU205"),  # --distributed-backend nccl
    ]:
        assert expected in found, expected


RNG_AND_TYPES = r"""
import torch
import torch_npu
from torch_npu.npu import _lazy_call, _lazy_init

x = torch.zeros(2, dtype=torch.bfloat16, device="npu")
assert x.type() == "torch.npu.BFloat16Tensor", x.type()
assert x.float().type() == "torch.npu.FloatTensor" and torch.zeros(2).type() == "torch.FloatTensor"
assert x.type(torch.float16).type() == "torch.npu.HalfTensor"

ran = []
_lazy_init()
_lazy_call(lambda: ran.append(1))
assert ran == [1]
generator = torch.npu.default_generators[0]
torch.npu.manual_seed(5)
state = generator.get_state()
assert state.shape == (16,) and torch.equal(state, torch.npu.random.get_rng_state())
first = torch.rand(3, device="npu")
generator.set_state(state)
assert torch.equal(torch.rand(3, device="npu"), first)
torch.npu.manual_seed(6)
assert not torch.equal(torch.rand(3, device="npu"), first)
print("ok")
"""


def test_npu_type_names_the_lazy_queue_and_the_default_generators(tmp_path: Path) -> None:
    """torch names a PrivateUse1 tensor `torch.<backend>.<dtype>Tensor`; torch_npu's `_lazy_call`
    runs a callback at once on an initialised device; `default_generators[i]` gets and sets the
    NPU's 16-byte state; `torch.npu.manual_seed` seeds what the NPU draws from."""
    script = tmp_path / "check.py"
    script.write_text(RNG_AND_TYPES)
    ran = run_cli("run", "--emulate", script, cwd=tmp_path)
    assert ran.returncode == 0 and ran.stdout.strip() == "ok", ran.stderr


def megatron_unfused(x: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """What Megatron's unfused path computes: scale, fill the masked logits, softmax in fp32."""
    return torch.softmax((x.float() * scale).masked_fill(mask, -10000.0), dim=-1).to(x.dtype)


def test_scaled_masked_softmax_is_megatrons_unfused_softmax_and_keeps_its_limits() -> None:
    x = torch.randn(2, 4, 64, 64, dtype=torch.bfloat16)
    mask = torch.rand(2, 1, 64, 64) > 0.7
    got = ops.npu_scaled_masked_softmax(x, mask, 0.125)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, megatron_unfused(x, mask, 0.125))
    causal = torch.ones(64, 64, dtype=torch.bool).triu(1)
    torch.testing.assert_close(
        ops.npu_scaled_masked_softmax(x, mask, 0.5, fixed_triu_mask=True), megatron_unfused(x, causal, 0.5)
    )
    with pytest.raises(ValueError, match="multiple of 32"):
        ops.npu_scaled_masked_softmax(torch.randn(1, 1, 48, 48), torch.zeros(1, 1, 48, 48, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask must be bool"):
        ops.npu_scaled_masked_softmax(x, mask.float())
