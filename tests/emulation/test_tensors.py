"""NPU tensors report the NPU under the emulation (emulation/tensors.py): their device, what is
computed from them, moves to and from the host (which copy, as a real device does), modules,
gradients, optimizer state and checkpoints loaded onto the NPU; and what a real NPU tensor
refuses. One emulated process runs every check."""

from __future__ import annotations

from pathlib import Path

from tests.emulation.test_device import run_cli, write

CHECKS = """
import io
import torch, torch_npu

x = torch.randn(3)
y = x.npu()
assert x.device.type == "cpu" and not x.is_npu
assert y.device == torch.device("npu:0") and y.is_npu and not y.is_cuda and y.get_device() == 0
assert y is not x and y.data_ptr() != x.data_ptr()  # a move to the device copies
y.add_(1)
assert torch.equal(x + 1, y.cpu())  # the host copy is untouched
for made in (y + 1, y * x.npu(), y.new_zeros(2), torch.zeros_like(y), y.to(torch.float64), y[1:], y.sum()):
    assert made.device.type == "npu", made
for host in (y.cpu(), y.to("cpu"), y.to(x), y.detach().cpu()):
    assert host.device.type == "cpu" and host is not y
assert torch.zeros(2, device="npu:0").is_npu and torch.randn(2).to(y).is_npu
# Lightning's precision plugins: `.to(dtype, non_blocking)` positionally; the bool is no device
assert y.to(torch.float64, True).is_npu and x.to(torch.float64, False).device.type == "cpu"
# Lightning's seed utilities save and restore every device's generator (torch_npu has both)
torch.npu.set_rng_state_all(torch.npu.get_rng_state_all())
# torch_npu's state is Philox's 16 bytes; DTensor's RNG tracker moves it to the NPU inside its
# dispatch, where no torch function mode runs: the allocation reaches the NPU's backend itself
with torch._C.DisableTorchFunction():
    below = torch.npu.get_rng_state().to(torch.device("npu", 0))
    made = torch.empty(2, 3, device="npu:0")
assert below.shape == (16,) and below.device.type == "npu" and made.device == torch.device("npu:0")
# Lightning's PyTorchProfiler reads events() back; torch_npu's profile has neither that nor
# key_averages() (its results go to files)
with torch_npu.profiler.profile() as prof:
    torch.ones(1) + 1
for missing in ("events", "key_averages"):
    try:
        getattr(prof, missing)
    except AttributeError:
        pass
    else:
        raise AssertionError(missing)
assert torch.npu.is_bf16_supported(including_emulation=False)  # torch_npu's signature (diffusers)
buffer = torch.empty(3)
buffer.copy_(y)  # copying into a host buffer leaves it on the host
assert buffer.device.type == "cpu"

model = torch.nn.Linear(4, 2).npu()
assert all(p.device.type == "npu" for p in model.parameters())
loss = model(torch.randn(5, 4, device="npu")).square().sum()
loss.backward()
assert model.weight.grad.device.type == "npu"
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
optimizer.step()
assert optimizer.state[model.weight]["exp_avg"].device.type == "npu"
assert next(model.cpu().parameters()).device.type == "cpu"

saved = io.BytesIO()
torch.save({"w": torch.ones(2)}, saved)
saved.seek(0)
assert torch.load(saved, map_location="npu:0")["w"].device.type == "npu"

before = torch.npu.memory_allocated()
block = torch.zeros(1000, device="npu")
assert torch.npu.memory_allocated() - before == 4000  # what the NPU tensors hold
del block
assert torch.npu.memory_allocated() == before and torch.npu.max_memory_allocated() >= before + 4000

branch = "npu" if y.device.type == "npu" else "cpu"  # device-dependent code takes the NPU branch
assert branch == "npu"
try:
    y.numpy()
except TypeError as refused:
    assert "can't convert npu:0 device type tensor to numpy" in str(refused)
else:
    raise AssertionError("an NPU tensor converted to numpy")

a8 = torch.randn(16, 16).npu().to(torch.float8_e4m3fn)
b8 = torch.randn(16, 16).npu().to(torch.float8_e4m3fn).t()
one = torch.ones((), device="npu")
try:  # torch_npu lists float8 matmul inputs for the Ascend 950 only; the emulation is an A2
    torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16)
except RuntimeError as refused:
    assert "float8 matrix products are not supported on this NPU (Ascend910B1" in str(refused)
else:
    raise AssertionError("a float8 matmul ran on the emulated Atlas A2")
assert (a8.to(torch.bfloat16) @ b8.to(torch.bfloat16)).device.type == "npu"  # cast first: it runs
print("all held")
"""


def test_npu_tensors_report_the_npu_and_move_as_on_a_device(tmp_path: Path) -> None:
    script = write(tmp_path, "checks.py", CHECKS)
    result = run_cli("run", "--emulate", script, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all held" in result.stdout
