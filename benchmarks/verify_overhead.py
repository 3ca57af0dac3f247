"""What verify costs on top of the model itself, on the bundled GPT fixture:

- plain forward passes of the original model in this process (the baseline);
- the same forward with verify's module hooks recording every input and output;
- the replay: every module called again on the recorded inputs, its callees' outputs swapped in
  (what the migrated side adds to judge each module's own code);
- a plain training step (forward, backward, AdamW) against one with what verify records after
  it (gradients, parameters, buffers and optimizer state copied to the CPU);
- whole `npu-migrate verify` runs (two side processes, emulated migrated side, comparison),
  forward only and with three steps;
- `verify --nproc 2 --steps 3` on the DDP fixture (each side under torchrun, two ranks) against
  plain torchrun runs of the same entry doing the same work (a warm-up, five timed and one
  recorded forward, three steps): the original's, and the migrated copy's on the emulation.

    python benchmarks/verify_overhead.py [--repeat N]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from npu_migrate.verify.capture import ModuleRecorder
from npu_migrate.verify.replay import replay
from npu_migrate.verify.side import training_state

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "verify" / "gpt"
RANKS_FIXTURE = FIXTURE.parent / "ddp"
TORCHRUN = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
# One rank of the plain run: the entry's model and batch, what a verify side runs, nothing recorded.
PLAIN_RANK = """
import sys
import torch
sys.path.insert(0, sys.argv[1])
import entry
parts = entry.build()
model, inputs = parts["model"], parts["inputs"]
model.eval()
with torch.no_grad():
    for _ in range(7):
        model(*inputs)
model.train()
for _ in range(3):
    loss = parts["loss_fn"](model(*inputs))
    parts["optimizer"].zero_grad()
    loss.backward()
    parts["optimizer"].step()
torch.distributed.destroy_process_group()
"""


def build() -> dict:
    sys.path.insert(0, str(FIXTURE / "original"))
    spec = importlib.util.spec_from_file_location("entry", FIXTURE / "original" / "entry.py")
    entry = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(entry)
    return entry.build()


def per_call_ms(fn: Callable[[], object], repeat: int) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) * 1000 / repeat


def whole_run_s(*more: str) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "npu_migrate", "verify", "--original", FIXTURE / "original",
         "--migrated", FIXTURE / "migrated", "--entry", "entry.py:build", *more],
        capture_output=True, check=True,
    )  # fmt: skip
    return time.perf_counter() - start


def timed_s(command: list[str | Path]) -> float:
    start = time.perf_counter()
    subprocess.run(command, capture_output=True, check=True)
    return time.perf_counter() - start


def ranks_rows(folder: Path) -> list[tuple[str, float, str]]:
    """verify --nproc 2 against the plain torchrun runs of both sides, in seconds."""
    script = folder / "plain_rank.py"
    script.write_text(PLAIN_RANK)
    original = timed_s([sys.executable, *TORCHRUN, script, RANKS_FIXTURE / "original"])
    emulated = timed_s(
        [sys.executable, "-m", "npu_migrate", "run", "--emulate", sys.executable, *TORCHRUN, script,
         RANKS_FIXTURE / "migrated"]
    )  # fmt: skip
    verified = timed_s(
        [sys.executable, "-m", "npu_migrate", "verify", "--original", RANKS_FIXTURE / "original",
         "--migrated", RANKS_FIXTURE / "migrated", "--entry", "entry.py:build",
         "--nproc", "2", "--steps", "3"]
    )  # fmt: skip
    both = original + emulated
    return [
        ("plain torchrun, original, 2 ranks (baseline)", original * 1000, ""),
        ("plain torchrun, migrated on the emulation", emulated * 1000, ""),
        (
            "verify --nproc 2 --steps 3",
            verified * 1000,
            f"+{(verified - both) * 1000:.0f} ms, {verified / both:.2f}x both",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    parts = build()
    model, inputs = parts["model"].eval(), parts["inputs"]
    with torch.no_grad():
        plain = per_call_ms(lambda: model(*inputs), args.repeat)
        recorder = ModuleRecorder(model.named_modules())
        hooked = per_call_ms(lambda: (recorder.rows.clear(), model(*inputs)), args.repeat)
        recorder.close()
        recorder = ModuleRecorder(model.named_modules())
        model(*inputs)
        recorder.close()
    given = {key: tensor for key, _, tensor in recorder.inputs}
    returned = {key: tensor for key, _, tensor in recorder.rows}
    named = {name or "(model)": module for name, module in model.named_modules()}
    replayed = per_call_ms(lambda: replay(recorder.calls, given, returned, named), args.repeat)
    model.train()
    optimizer, loss_fn = parts["optimizer"], parts["loss_fn"]

    def step() -> None:
        loss = loss_fn(model(*inputs))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    def recorded_step() -> None:
        step()
        {n: p.grad.detach().to("cpu", copy=True) for n, p in model.named_parameters() if p.grad is not None}
        training_state(model, optimizer)

    stepped = per_call_ms(step, args.repeat)
    recorded = per_call_ms(recorded_step, args.repeat)
    forward_run, steps_run = whole_run_s(), whole_run_s("--steps", "3")
    rows = [
        ("plain forward (baseline)", plain, ""),
        ("forward with verify's hooks", hooked, f"{hooked / plain:.2f}x"),
        (f"replay of every module ({len(recorder.calls)} calls)", replayed, f"{replayed / plain:.2f}x"),
        ("plain training step (baseline)", stepped, ""),
        ("step with verify's records", recorded, f"{recorded / stepped:.2f}x"),
        ("whole verify run, forward", forward_run * 1000, f"{forward_run * 1000 / plain:.0f} forwards"),
        ("whole verify run, --steps 3", steps_run * 1000, f"+{(steps_run - forward_run) * 1000:.0f} ms"),
    ]
    with tempfile.TemporaryDirectory() as folder:
        rows += ranks_rows(Path(folder))
    for label, ms, ratio in rows:
        print(f"{label:<46}{ms:10.2f} ms" + (f"  ({ratio})" if ratio else ""))


if __name__ == "__main__":
    main()
