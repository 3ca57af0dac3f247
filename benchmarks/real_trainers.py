"""Real distributed trainers we did not write, migrated by `apply` and run with two ranks under
`npu-migrate run --emulate` (torchrun), against the unmigrated originals run with gloo on the
CPU: their losses step by step, rank by rank, read without changing the trainers
(tests/emulation/losses/sitecustomize.py records each backward's loss).

    python benchmarks/real_trainers.py [--only NAME]

Sources are commits of git mirrors (tests/sources.py: `fetch github:pytorch/examples` and
`github:karpathy/nanoGPT` bring them). An original written for CUDA alone gets the few edits
listed with it, and nothing else, to run on the CPU: that is the baseline. accelerate's own
scripts, launched by `accelerate launch`, are compared the same way in the test suite
(tests/emulation/test_real_trainers.py). Prints one row per trainer; always exits 0."""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.sources import NANOGPT, PYTORCH_EXAMPLES, Snapshot, checkout

ROOT = Path(__file__).resolve().parent.parent
LOSSES = ROOT / "tests" / "emulation" / "losses"
TORCHRUN = [str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc_per_node", "2"]


def _shakespeare_like(tree: Path) -> None:
    """nanoGPT's data as its prepare.py leaves it (uint16 tokens, a vocabulary in meta.pkl),
    drawn at random: prepare.py downloads, and this machine has no internet."""
    import pickle

    import numpy as np

    data = tree / "data" / "shakespeare_char"
    data.mkdir(parents=True)
    tokens = np.random.default_rng(0).integers(0, 65, 20_000).astype(np.uint16)
    tokens[:16_000].tofile(data / "train.bin")
    tokens[16_000:].tofile(data / "val.bin")
    (data / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": 65}))


def _fsdp2_start(tree: Path) -> None:
    """A start for PyTorch's FSDP2 example in its own checkpoint format, which it loads where one
    is: its fresh start leaves the blocks as `to_empty` left them (its Transformer's
    reset_parameters skips `layers`), NaN here on either side, and DTensor draws the rest with the
    NPU's offset-based RNG where the CPU has none. model.py's default initialisation, seeded; Adam
    with nothing accumulated yet."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("fsdp2_example_model", tree / "model.py")
    assert spec is not None and spec.loader is not None
    model_py = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model_py)
    torch.manual_seed(0)
    args = model_py.ModelArgs(n_layers=10, n_heads=4, vocab_size=1024, max_seq_len=64, dropout_p=0)
    model = model_py.Transformer(args)  # the example's arguments
    groups = torch.optim.Adam(model.parameters(), lr=1e-2).state_dict()["param_groups"]
    moments = {
        i: {"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
        for i, p in enumerate(model.parameters())
    }
    folder = tree / "checkpoints" / "dtensor_api" / "0"
    folder.mkdir(parents=True)
    torch.save(model.state_dict(), folder / "model_state_dict.pt")
    torch.save({"param_groups": groups, "state": moments}, folder / "optim_state_dict.pt")


@dataclass(frozen=True)
class Trainer:
    name: str
    source: Snapshot
    folder: str  # the trainer's folder in the snapshot
    script: str
    args: tuple[str, ...]
    on_the_cpu: tuple[tuple[str, str], ...]  # the original's edits to run with gloo on the CPU
    cpu_args: tuple[str, ...] = ()  # and its arguments there
    prepare: Callable[[Path], None] | None = None  # data the trainer reads, in both trees
    env: dict[str, str] = field(default_factory=dict)


NANOGPT_ARGS = (
    "--dataset=shakespeare_char", "--batch_size=4", "--block_size=32", "--n_layer=2", "--n_head=2",
    "--n_embd=32", "--dropout=0.0", "--max_iters=8", "--lr_decay_iters=8", "--eval_interval=1000",
    "--eval_iters=1", "--log_interval=1", "--gradient_accumulation_steps=2", "--dtype=float32",
    "--compile=False", "--out_dir=out",
)  # fmt: skip

TRAINERS = [
    Trainer(
        "pytorch/examples ddp-tutorial-series (DDP)",
        PYTORCH_EXAMPLES,
        "distributed/ddp-tutorial-series",
        "multigpu_torchrun.py",
        ("2", "1", "--batch_size", "32"),
        (
            ('    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))\n', ""),
            ('backend="nccl"', 'backend="gloo"'),
            ("self.model = model.to(self.gpu_id)", "self.model = model"),
            ("DDP(self.model, device_ids=[self.gpu_id])", "DDP(self.model)"),
            ("source = source.to(self.gpu_id)", "source = source"),
            ("targets = targets.to(self.gpu_id)", "targets = targets"),
        ),
        env={"LOSS_SEED": "0"},  # its dataset draws torch.rand unseeded
    ),
    Trainer(
        "pytorch/examples FSDP2 (fully_shard, DCP checkpoint)",
        PYTORCH_EXAMPLES,
        "distributed/FSDP2",
        "example.py",
        (),
        (
            ("if not verify_min_gpu_count(min_gpus=_min_gpu_count):", "if False:"),
            ("init_process_group(backend=backend, device_id=device)", "init_process_group(backend=backend)"),
        ),
        prepare=_fsdp2_start,
    ),
    Trainer(
        "nanoGPT train.py (DDP, gradient accumulation)",
        NANOGPT,
        ".",
        "train.py",
        NANOGPT_ARGS,
        (
            (
                "    device = f'cuda:{ddp_local_rank}'\n    torch.cuda.set_device(device)\n",
                "    device = 'cpu'\n",
            ),
            ("DDP(model, device_ids=[ddp_local_rank])", "DDP(model)"),
        ),
        cpu_args=("--backend=gloo", "--device=cpu"),
        prepare=_shakespeare_like,
    ),
]


def _run(
    command: list[str], cwd: Path, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.perf_counter()
    done = subprocess.run(
        command, cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True, check=False
    )
    return done, time.perf_counter() - start


def losses(log: Path, rank: int) -> list[float]:
    """One rank's losses as losses/sitecustomize.py logged them (none where the rank logged none)."""
    path = Path(f"{log}.rank{rank}")
    return [json.loads(line)["loss"] for line in path.read_text().splitlines()] if path.is_file() else []


def edit_for_the_cpu(script: Path, edits: Sequence[tuple[str, str]]) -> str | None:
    """Make a CUDA original's few edits to run with gloo on the CPU, in place: each edit's text
    must still be in the script (else that text is returned and nothing is written)."""
    text = script.read_text()
    for old, new in edits:
        if old not in text:
            return old
        text = text.replace(old, new)
    script.write_text(text)
    return None


def measure(trainer: Trainer, work: Path) -> dict[str, object]:
    """Both runs of one trainer, and how their losses compare."""
    source = checkout(trainer.source) / trainer.folder
    original, cpu, migrated = work / "original", work / "cpu", work / "migrated"
    shutil.copytree(source, original)
    applied = subprocess.run(
        [sys.executable, "-m", "npu_migrate", "apply", original, "--out", migrated, "--no-change-list"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    changes = next(
        (line for line in applied.stdout.splitlines() if line.startswith("rewrote")), "rewrote nothing"
    )
    shutil.copytree(original, cpu)
    missing = edit_for_the_cpu(cpu / trainer.script, trainer.on_the_cpu)
    if missing is not None:
        return {"trainer": trainer.name, "error": f"the original no longer has {missing!r}"}
    for tree in (cpu, migrated):
        if trainer.prepare is not None:
            trainer.prepare(tree)
    env = {**trainer.env, "PYTHONPATH": str(LOSSES), "LOSS_SCRIPT": trainer.script}
    before, cpu_s = _run(
        [*TORCHRUN, trainer.script, *trainer.args, *trainer.cpu_args],
        cpu,
        {**env, "LOSS_LOG": str(work / "cpu")},
    )
    after, npu_s = _run(
        [sys.executable, "-m", "npu_migrate", "run", "--emulate", *TORCHRUN, trainer.script, *trainer.args],
        migrated,
        {**env, "LOSS_LOG": str(work / "npu")},
    )
    row: dict[str, object] = {"trainer": trainer.name, "changes": changes, "seconds": (cpu_s, npu_s)}
    for side, done in (("original", before), ("migrated", after)):
        if done.returncode != 0:
            said = [line for line in (done.stderr + done.stdout).splitlines() if "Error" in line]
            why = (said[0] if said else done.stderr[-500:])[:160]
            row["error"] = f"the {side} exited {done.returncode}: {why}"
            return row
    worst, steps = 0.0, []
    for rank in (0, 1):
        a, b = losses(work / "cpu", rank), losses(work / "npu", rank)
        steps.append((len(a), len(b)))
        for x, y in zip(a, b, strict=False):  # a NaN on either side is a difference, not a pass
            worst = max(worst, abs(y - x) / max(abs(x), 1e-12)) if math.isfinite(x + y) else math.inf
    row |= {"steps": steps, "worst": worst, "passed": all(x == y > 0 for x, y in steps) and worst <= 1e-5}
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="a trainer whose name contains this")
    args = parser.parse_args()
    chosen = [t for t in TRAINERS if args.only is None or args.only in t.name]
    print(f"{'trainer':52} {'losses per rank':>16} {'worst rel diff':>15} {'s cpu / emulated':>17}  verdict")
    for trainer in chosen:
        with tempfile.TemporaryDirectory(prefix="npu-migrate-trainer-") as folder:
            row = measure(trainer, Path(folder))
        if "error" in row:
            print(f"{trainer.name:52} ERROR {row['error']}")
            continue
        steps = " / ".join(f"{a}={b}" if a == b else f"{a}!={b}" for a, b in row["steps"])  # type: ignore[attr-defined]
        seconds = "{:.1f} / {:.1f}".format(*row["seconds"])  # type: ignore[str-format]
        verdict = "PASS" if row["passed"] else "FAIL"
        figures = f"{steps:>16} {row['worst']:>15.2e} {seconds:>17}"
        print(f"{trainer.name:52} {figures}  {verdict}  ({row['changes']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
