"""The NPU emulation as migrated code meets it, through `npu-migrate run --emulate` in a child
process (installing the emulation changes torch for the whole process)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from npu_migrate.emulation import TRITON_VARIABLE
from tests.fixture_cases import run_cli

pytest.importorskip("torch")

DEVICE_API = r"""
import sys
import torch
import torch_npu

assert __name__ == "__main__" and sys.argv[1:] == ["--steps", "2"], sys.argv
assert torch.npu.is_available() and torch.npu.device_count() >= 1
torch.npu.set_device(0)
assert torch.npu.current_device() == 0
device = torch.device("npu:0")
x = torch.randn(4, 3, device="npu")
y = torch.ones(4, 3).npu(non_blocking=True)
z = torch.zeros(2, device=device).to("npu").to(device=torch.device("npu", 0))
assert x.is_npu and y.is_npu and z.is_npu
model = torch.nn.Linear(3, 2).npu()
model.to("npu:0")
assert next(model.parameters()).is_npu
torch.manual_seed(0)
torch.npu.manual_seed_all(0)
start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
stream = torch.npu.Stream()
start.record()
with torch.npu.stream(stream):
    out = model(x)
end.record()
torch.npu.synchronize()
assert end.elapsed_time(start) <= 0 <= start.elapsed_time(end)
torch.npu.matmul.allow_hf32 = True
torch.npu.conv.allow_hf32 = False
assert torch.npu.matmul.allow_hf32 and not torch.npu.conv.allow_hf32
with torch.npu.amp.autocast(dtype=torch.bfloat16):
    assert model(x).dtype == torch.bfloat16
with torch.autocast("npu", dtype=torch.bfloat16):
    assert model(x).dtype == torch.bfloat16
scaler = torch.npu.amp.GradScaler()
loss = model(x).sum()
scaler.scale(loss).backward()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler.step(opt)
scaler.update()
assert torch.amp.GradScaler("npu").is_enabled() in (True, False)
torch.save(model.state_dict(), sys.argv[0] + ".pt")
state = torch.load(sys.argv[0] + ".pt", map_location="npu")
assert all(t.is_npu for t in state.values())
on_host = torch.load(sys.argv[0] + ".pt", map_location="cpu")  # mmengine's EMA hook test compares so
assert not any(t.is_npu for t in on_host.values()) and all(t.device.type == "cpu" for t in on_host.values())
assert torch.npu.memory_allocated() >= 0 and torch.npu.get_device_capability() is None
print("device api ok")
sys.exit(3)
"""


def write(tmp_path: Path, name: str, code: str) -> Path:
    path = tmp_path / name
    path.write_text(code)
    return path


def emulated(tmp_path: Path, name: str, code: str) -> str:
    """What a script prints, run through `npu-migrate run --emulate`, which must succeed."""
    result = run_cli("run", "--emulate", write(tmp_path, name, code), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_migrated_device_code_runs_on_the_emulation(tmp_path: Path) -> None:
    script = write(tmp_path, "train.py", DEVICE_API)
    result = run_cli("run", "--emulate", script, "--steps", "2", cwd=tmp_path)
    assert "device api ok" in result.stdout, result.stderr
    assert result.returncode == 3, "the script's own exit code"
    assert "torch_npu is emulated on cpu" in result.stderr


def test_without_torch_npu_run_says_it_emulates(tmp_path: Path) -> None:
    script = write(tmp_path, "s.py", "import torch_npu, torch\nprint(torch.zeros(1, device='npu').device)\n")
    result = run_cli("run", script, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "npu:0"  # an NPU tensor reports the NPU, on the CPU backing
    assert "emulated" in result.stderr


def test_no_emulation_means_a_real_torch_npu_is_needed(tmp_path: Path) -> None:
    script = write(tmp_path, "s.py", "import torch_npu\n")
    result = run_cli("run", "--no-emulate", script, cwd=tmp_path)
    assert result.returncode == 1
    assert "ModuleNotFoundError: No module named 'torch_npu'" in result.stderr


def test_the_stand_in_is_never_found_unless_asked_for() -> None:
    import importlib.util

    assert importlib.util.find_spec("torch_npu") is None
    assert all("emulation" not in p for p in sys.path)


def test_a_missing_script_is_one_line(tmp_path: Path) -> None:
    result = run_cli("run", "nope.py", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip() == "error: no such script or command: nope.py"


def test_the_hccl_backend_runs_on_gloo(tmp_path: Path) -> None:
    script = write(
        tmp_path,
        "dist.py",
        "import socket, torch, torch_npu\nimport torch.distributed as dist\n"
        "with socket.socket() as s:\n    s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]\n"
        "dist.init_process_group('hccl', init_method=f'tcp://127.0.0.1:{port}', rank=0, world_size=1)\n"
        "t = torch.full((3,), 2.0, device='npu')\ndist.all_reduce(t)\n"
        "print(dist.get_backend(), dist.is_hccl_available(), t.tolist())\ndist.destroy_process_group()\n",
    )
    result = run_cli("run", "--emulate", script, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "hccl True [2.0, 2.0, 2.0]"


TRAINING_LOOP = r"""
import torch
import torch_npu
from torch.utils.data import DataLoader, TensorDataset

data = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
loader = DataLoader(data, batch_size=8, shuffle=True, pin_memory=True,
                    generator=torch.Generator(device="cpu").manual_seed(0))
model = torch.nn.Linear(4, 1).npu()
step = torch.compile(lambda x: model(x).pow(2).mean())
noise = torch.randn(2, generator=torch.Generator(device="npu").manual_seed(1), device="npu")
assert isinstance(torch.Generator(device="npu"), torch.Generator) and noise.is_npu
for x, y in loader:
    x = x.pin_memory().npu(non_blocking=True)
    loss = step(x)
    loss.backward()
print("training loop ok", round(float(loss), 3) >= 0)
"""


def test_ordinary_training_loops_run_on_the_emulation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pinned memory, DataLoader pinning, NPU generators and torch.compile raised "Please register
    PrivateUse1HooksInterface" or "not linked with support for npu devices". Inductor on NPU
    tensors needs triton-ascend, as torch_npu 2.13 has it: without, the first call fails."""
    script = write(tmp_path, "loop.py", TRAINING_LOOP)
    stock = run_cli("run", "--emulate", script, cwd=tmp_path)
    assert stock.returncode == 1
    assert "triton-ascend is not installed. Please install it first." in stock.stderr
    assert "BackendCompilerFailed: backend='inductor' raised:" in stock.stderr
    assert "AssertionError: Device npu not supported" in stock.stderr
    torchair = write(
        tmp_path,
        "torchair.py",
        TRAINING_LOOP.replace("torch.compile(", "torch.compile(backend='npu', model="),
    )
    result = run_cli("run", "--emulate", torchair, cwd=tmp_path)
    assert result.returncode == 0 and "training loop ok True" in result.stdout, result.stderr
    monkeypatch.setenv(TRITON_VARIABLE, "1")
    result = run_cli("run", "--emulate", script, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "training loop ok True" in result.stdout


COMPILED_FUSED_OPS = r"""
import torch
import torch._dynamo.utils
import torch_npu

model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8)).npu()
gamma = torch.ones(8, device="npu")


def block(x):
    h = torch_npu.npu_rms_norm(model(x), gamma, epsilon=1e-6)[0].view(2, 1, 4, 8)
    a = torch_npu.npu_fusion_attention(h, h, h, 1, "BNSD", scale=8 ** -0.5)[0]
    return torch_npu.npu_fast_gelu(a)


x = torch.randn(8, 8, device="npu")
eager, compiled = block(x), torch.compile(block)(x)
counters = torch._dynamo.utils.counters
breaks = sum(counters["graph_break"].values())
print(torch.allclose(eager, compiled, rtol=1e-5, atol=1e-6), counters["stats"]["unique_graphs"], breaks)
"""


def test_torch_compile_traces_the_emulated_fused_ops_in_one_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inductor (on a host with triton-ascend) compiles migrated code with its fused operators
    whole, and agrees with eager."""
    monkeypatch.setenv(TRITON_VARIABLE, "1")
    printed = emulated(tmp_path, "compiled.py", COMPILED_FUSED_OPS)
    assert printed.split() == ["True", "1", "0"], printed


def test_an_error_the_emulation_raises_says_so(tmp_path: Path) -> None:
    bad = (
        "import torch, torch_npu\nq = torch.randn(1, 2, 4, 8)\n"
        "torch_npu.npu_fusion_attention(q, q, q, 3, 'BNSD')\n"
    )
    result = run_cli("run", "--emulate", write(tmp_path, "bad.py", bad), cwd=tmp_path)
    assert result.returncode == 1
    assert "head_num=3 does not match" in result.stderr
    assert "npu-migrate: this error comes from the NPU emulation (ops.py:" in result.stderr
    ours = "import torch, torch_npu\nraise ValueError('mine')\n"
    result = run_cli("run", "--emulate", write(tmp_path, "ours.py", ours), cwd=tmp_path)
    assert result.returncode == 1 and "mine" in result.stderr and "NPU emulation (" not in result.stderr


# A test module that hides the accelerators before torch looks (open_clip's tests set
# CUDA_VISIBLE_DEVICES to "", migrated to ASCEND_RT_VISIBLE_DEVICES): torch_npu's device_count
# reads the variable as its _parse_visible_devices does, so the emulation must too.
HIDDEN_DEVICES = r"""
import os
import torch
import torch_npu

raw = torch.npu.device_count()
two = min(2, raw)
cases = (("", 0), ("0", 1), ("0,1", two), ("1,0", 0), ("1", int(raw > 1)), ("0x", 1), ("x", 0))
for value, count in cases:
    os.environ["ASCEND_RT_VISIBLE_DEVICES"] = value
    assert torch.npu.device_count() == count, (value, torch.npu.device_count())
os.environ["ASCEND_RT_VISIBLE_DEVICES"] = ""
assert torch.npu.is_available()  # the runtime's answer, by default
os.environ["PYTORCH_HAL_BASED_NPU_CHECK"] = "1"
assert not torch.npu.is_available()  # torch_npu's own count, hidden devices
del os.environ["ASCEND_RT_VISIBLE_DEVICES"]
assert torch.npu.is_available() and torch.npu.device_count() == raw >= 1
print("visible devices ok")
"""


def test_device_count_honours_ascend_rt_visible_devices(tmp_path: Path) -> None:
    assert "visible devices ok" in emulated(tmp_path, "hide.py", HIDDEN_DEVICES)


# mmengine's mmengine/device/utils.py decides whether the NPU is there by importing
# torch_npu.npu.utils and setting the compile mode inside one `try`; any gap in the emulation made
# it answer no, and mmengine then took its CUDA branch (`torch.cuda.set_device`) on the NPU.
MMENGINE_NPU_CHECK = r"""
import os
import torch

try:
    import torch_npu  # noqa: F401
    import torch_npu.npu.utils as npu_utils

    torch.npu.set_compile_mode(jit_compile=bool(os.getenv("NPUJITCompile", False)))
    IS_NPU_AVAILABLE = hasattr(torch, "npu") and torch.npu.is_available()
except Exception:
    IS_NPU_AVAILABLE = False
assert IS_NPU_AVAILABLE
assert npu_utils.get_soc_version() >= 220 and npu_utils.set_device is torch.npu.set_device
from torch.npu.amp import GradScaler  # mmengine's amp_optimizer_wrapper, once the NPU is found

assert GradScaler is torch.npu.amp.GradScaler
# mmengine's structures/instance_data.py: `Union[torch.BoolTensor, torch.npu.BoolTensor].__args__`
from typing import Union

mask = torch.tensor([True, False]).npu()
assert isinstance(mask, Union[torch.BoolTensor, torch.npu.BoolTensor].__args__)
assert isinstance(mask, torch.npu.BoolTensor) and not isinstance(torch.tensor([True]), torch.npu.BoolTensor)
assert torch.npu.FloatTensor([0.5]).is_npu and torch.npu.LongTensor(2, 3).dtype == torch.int64
print("mmengine sees the npu")
"""


def test_mmengine_finds_the_emulated_npu(tmp_path: Path) -> None:
    assert "mmengine sees the npu" in emulated(tmp_path, "check.py", MMENGINE_NPU_CHECK)


# Lightning's XLA tests monkeypatch `torch.device` with a Mock whose isinstance check always says
# yes; code that builds devices through the mock must not make the emulation read a float or a
# mock as a device (it raised "'float' object has no attribute 'type'" in tensor creation).
MOCKED_DEVICE_CLASS = r"""
from unittest import mock
import torch
import torch_npu


class DeviceMock(mock.Mock):
    def __instancecheck__(self, instance):
        return True


with mock.patch.object(torch, "device", DeviceMock()):
    assert torch.full((2,), 0.5).tolist() == [0.5, 0.5]
    assert torch.tensor([1.0], device="npu").is_npu
print("mocked device ok")
"""


def test_a_mocked_torch_device_does_not_fool_the_emulation(tmp_path: Path) -> None:
    assert "mocked device ok" in emulated(tmp_path, "mocked.py", MOCKED_DEVICE_CLASS)


# Names NPU101 writes that the emulation leaves out, each for a reason: allocator internals and
# graph pools have no meaning on the CPU backing, and code that calls them is rare enough that a
# failure under the emulation (which says it comes from the emulation) is the honest answer.
NOT_EMULATED = {
    "ExternalStream",
    "MemPool",
    "use_mem_pool",
    "caching_allocator_alloc",
    "caching_allocator_delete",
    "change_current_allocator",
    "random",
    "streams",
}


def test_every_torch_npu_name_a_rule_writes_is_emulated() -> None:
    """diffusers' test helpers keep a table of `torch.cuda.reset_max_memory_allocated` and the
    like; NPU101 writes `torch.npu.<name>` for each, and torch_npu has them all, so the emulation
    must too, or a migrated tree fails under it where it would run on an NPU."""
    pytest.importorskip("torch")
    from npu_migrate.emulation import npu_module
    from npu_migrate.rules.load import load_rules

    names = {
        name.removeprefix("torch.cuda.").split(".")[0]
        for rule in load_rules()
        if rule.code == "NPU101"
        for name in rule.match.name  # type: ignore[union-attr]
    }
    missing = sorted(n for n in names - NOT_EMULATED if not hasattr(npu_module, n))
    assert missing == [], f"NPU101 writes torch.npu names the emulation lacks: {missing}"


def test_the_deprecated_memory_names_warn_and_answer_as_torch_npu_does() -> None:
    pytest.importorskip("torch")
    import warnings

    from npu_migrate.emulation import npu_module

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        npu_module.reset_max_memory_allocated()
        assert npu_module.memory_cached() == npu_module.memory_reserved()
    assert [w.category for w in caught] == [DeprecationWarning, DeprecationWarning]
    with pytest.raises(TypeError):
        npu_module.set_per_process_memory_fraction(1)
    assert len(npu_module.get_rng_state_all()) == npu_module.device_count()


CHECKPOINTED = """
import torch
import torch_npu
from torch.utils.checkpoint import checkpoint

def block(x, layer):
    y = layer(x) / 2.0
    if y.device.type == "npu":  # what the recompute saves must be what the forward saved
        return torch.sigmoid(y) * y
    return y.sin()

def nested(x, layer):
    return checkpoint(block, x / 3.0, layer, use_reentrant=False)

layer = torch.nn.Linear(4, 4).npu()
for reentrant in (False, True):
    x = torch.randn(2, 4).npu().requires_grad_()
    block(x, layer).sum().backward()
    expected, x.grad = x.grad, None
    checkpoint(block, x, layer, use_reentrant=reentrant).sum().backward()
    same = torch.allclose(x.grad, expected)  # the recompute took the forward's branch
    print("reentrant" if reentrant else "non-reentrant", x.grad.device, layer.weight.grad.device, same)
x = torch.randn(2, 4).npu().requires_grad_()
checkpoint(nested, x, layer, use_reentrant=False).sum().backward()  # diffusers' UNet blocks nest them
print("nested", x.grad.device)
"""


def test_checkpoint_recomputes_on_the_npu_as_its_forward_ran(tmp_path: Path) -> None:
    """diffusers' gradient checkpointing test: the recompute runs inside backward, where no mode
    sees torch calls; its tensors (and checkpoint's check of them) must be on the NPU again."""
    out = emulated(tmp_path, "checkpointed.py", CHECKPOINTED)
    assert "non-reentrant npu:0 npu:0 True" in out and "\nreentrant npu:0 npu:0 True" in out
    assert "nested npu:0" in out


CUSTOM_FUNCTION = """
import torch
import torch_npu


class Scaled(torch.autograd.Function):  # a fused kernel's autograd function, as Megatron writes them
    @staticmethod
    def forward(ctx, x, scale):
        y = x * scale
        ctx.save_for_backward(y, torch.tensor([scale]))
        return y

    @staticmethod
    def backward(ctx, grad):
        y, scale_t = ctx.saved_tensors
        print("saved", y.device, "grad", grad.device, "host", scale_t.device)
        return grad * scale_t.item(), None


x = torch.randn(3, device="npu", requires_grad=True)
Scaled.apply(x, 2.0).sum().backward()
print("x.grad", x.grad.device, x.grad.tolist() == [2.0, 2.0, 2.0])
"""


def test_a_custom_functions_backward_sees_its_tensors_on_the_npu(tmp_path: Path) -> None:
    """autograd hands a custom Function's backward new tensors (its saved output unpacked, the
    engine's gradients): on an NPU they are NPU tensors, so a guard there (`x.device.type ==
    "npu"`) takes the fused kernel; a host tensor it saved stays on the host."""
    out = emulated(tmp_path, "custom_function.py", CUSTOM_FUNCTION)
    assert "saved npu:0 grad npu:0 host cpu" in out and "x.grad npu:0 True" in out, out


AMP_TRAINING = """\
import torch
from torch.amp import GradScaler

model = torch.nn.Linear(4, 1).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = GradScaler()
for _ in range(2):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(torch.randn(8, 4).cuda()).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
print("scaling", scaler.is_enabled())
"""


def test_a_default_grad_scaler_scales_on_the_npu_once_migrated(tmp_path: Path) -> None:
    """`torch.amp.GradScaler()` means CUDA, which torch disables (with a warning) where there is
    none: with only the device edits, fp16 training on the emulated NPU runs unscaled; `apply`
    also names the scaler's device (NPU303), and the scaler is on."""
    devices_only = AMP_TRAINING.replace(".cuda()", ".npu()").replace('"cuda"', '"npu"')
    assert "scaling False" in emulated(tmp_path, "devices_only.py", "import torch_npu\n" + devices_only)
    (tmp_path / "src").mkdir()
    write(tmp_path / "src", "train.py", AMP_TRAINING)
    applied = run_cli("apply", "src", "--out", "npu", cwd=tmp_path)
    assert applied.returncode in (0, 1), applied.stderr
    migrated = (tmp_path / "npu" / "train.py").read_text()
    assert 'GradScaler(device="npu")' in migrated
    assert "scaling True" in emulated(tmp_path / "npu", "train.py", migrated)


INTEGER_DEVICES = """\
import torch
import torch_npu

# DINO's and MAE's `.to(args.gpu)`: torch >= 2.5 reads an integer device as an index of the
# current accelerator (pytorch#129119), which is the NPU once torch_npu is imported
x = torch.zeros(2).to(0)
y = torch.ones(2, device=0)
m = torch.nn.Linear(2, 2).to(0)
assert x.device == y.device == next(m.parameters()).device == torch.device(0) == torch.device("npu", 0)
print("integer devices are the npu")
"""


def test_an_integer_device_is_the_npu(tmp_path: Path) -> None:
    assert "integer devices are the npu" in emulated(tmp_path, "devices.py", INTEGER_DEVICES)


COMPILED_RESULTS = r"""
import torch
import torch_npu

scaled = torch.compile(lambda x, p: (torch.nn.functional.silu(x) * p).to(x.dtype))
x = torch.ones(2, 3, device="npu", dtype=torch.bfloat16, requires_grad=True)
y = scaled(x, torch.ones(2, 1, device="npu"))
y.sum().backward()
layer = torch.compile(torch.nn.Linear(3, 2).npu())

@torch.compile(fullgraph=True)
def shifted(x):
    return x + 1

print(y.device, x.grad.device, layer(torch.ones(1, 3, device="npu")).device,
      shifted(torch.ones(2, device="npu")).device, shifted(torch.ones(2)).device)
"""


def test_what_torch_compile_makes_returns_tensors_on_the_npu_its_inputs_are_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Megatron's `jit_fuser` (torch.compile) activation handed host tensors to the NPU operators
    after it: a compiled graph runs where the emulation tracks no tensor. Functions, modules and
    the decorator form now return on their inputs' device, as on the NPU."""
    monkeypatch.setenv(TRITON_VARIABLE, "1")  # a host with triton-ascend: Inductor on the NPU
    script = write(tmp_path, "compiled.py", COMPILED_RESULTS)
    result = run_cli("run", "--emulate", script, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["npu:0", "npu:0", "npu:0", "npu:0", "cpu"]


DEFAULT_NPU = r"""
import torch
import torch_npu

with torch.device("npu"):  # torch's default-device mode: factories with no kernel of the NPU's key too
    scoped = torch.tril_indices(3, 3)
torch.set_default_device("npu")  # PEFT's MonteCLoRA builds its indices so under --tests-device npu
made = [torch.tril_indices(3, 3), torch.triu_indices(3, 3, 1), torch.zeros(2), torch.arange(3)]
print(scoped.device, *(t.device for t in made), torch.tril_indices(3, 3, device="cpu").device)
"""


def test_factories_follow_a_default_device_of_the_npu(tmp_path: Path) -> None:
    """torch_npu registers tril_indices and triu_indices (npu_native_functions.yaml): under an NPU
    default device they make NPU tensors, as zeros and arange do; an explicit device still wins."""
    printed = emulated(tmp_path, "default.py", DEFAULT_NPU).split()
    assert printed == ["npu:0"] * 5 + ["cpu"]
