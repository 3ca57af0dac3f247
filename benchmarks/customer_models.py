"""The models a porting team brings first, through verify on tiny configs of their own code: each
project's model files at a pinned commit, with an entry from tests/real_models/entries/, run as
`verify TREE --unsafe --steps 3` (the tight rule on the emulation; it must pass), then migrated
with `apply --unsafe`, one realistic porting mistake planted in the migrated copy, and verified
again (`verify --original --migrated --steps 3`): it must fail with the blame on the module whose
code holds the mistake.

    python -m benchmarks.customer_models [--only NAME ...]

The models' imports come from the second environment (torch 2.14.1 with torchvision 0.29.1: see
the developers' guide) plus, on PYTHONPATH, what each model names in `needs` (installed with
`pip install --target DIR --no-deps`). The sources are git mirrors at pinned commits
(`fetch github:OWNER/NAME` first; tests/sources.py). Exits 1 when a verdict is not as expected.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import by_model
from tests.sources import HUNYUAN_VIDEO, INTERNVL, OPEN_SORA_PLAN, WAN_2_1, Snapshot, checkout

ENTRIES = Path(__file__).resolve().parent.parent / "tests" / "real_models" / "entries"


@dataclass(frozen=True)
class Planted:
    """One porting mistake: `old` replaced by `new` in `file` of the migrated copy."""

    what: str
    file: str  # relative to the tree
    old: str
    new: str
    module: str  # where verify must blame it


@dataclass(frozen=True)
class Model:
    name: str
    kind: str
    snapshot: Snapshot
    package: str  # the folder inside the snapshot that the entry imports
    entry: str  # a file in tests/real_models/entries
    needs: str  # packages beyond the torchvision environment, pinned
    planted: tuple[Planted, ...]
    function: str = "build"  # the entry's function


MODELS = [
    Model(
        "internvl",
        "InternVL chat: InternViT (RMSNorm, q/k norm) -> pixel shuffle -> MLP -> InternLM2 decoder",
        INTERNVL,
        "internvl_chat/internvl",
        "internvl_chat.py",
        "transformers==4.46.3 timm==0.9.12 einops==0.6.1 peft==0.10.0 accelerate==0.34.2 psutil",
        (
            Planted(
                "the ViT's fused attention scaled by the full width, not the head's",
                "internvl/model/internvl_chat/modeling_intern_vit.py",
                'q.shape[1], "BNSD", scale=self.scale,',
                'q.shape[1], "BNSD", scale=C ** -0.5,',
                "vision_model.encoder.layers.0.attn",
            ),
            Planted(
                "InternLM2's fused RoPE with cos and sin swapped",
                "internvl/model/internlm2/modeling_internlm2.py",
                "npu_rotary_mul(q, npu_rotary_table(cos, q), npu_rotary_table(sin, q), npu_rotary_mode",
                "npu_rotary_mul(q, npu_rotary_table(sin, q), npu_rotary_table(cos, q), npu_rotary_mode",
                "language_model.model.layers.0.attention",
            ),
        ),
    ),
    Model(
        "open-sora-plan",
        "Open-Sora Plan v1.3: a text-to-video diffusion transformer (3-D RoPE, adaLN-single, sparse "
        "1-D attention, caption cross-attention); its own Ascend branch is not taken on the emulation "
        "(tests/real_models/entries/open_sora_plan.py says why)",
        OPEN_SORA_PLAN,
        "opensora",
        "open_sora_plan.py",
        "diffusers==0.30.2 einops==0.7.0 accelerate==0.34.0 tensorboard==2.20.0 absl-py==2.1.0",
        (
            Planted(
                "the 3-D RoPE table interleaved while the tokens keep the half layout",
                "opensora/models/diffusion/common.py",
                "freqs = torch.cat((freqs, freqs), dim=-1)",
                "freqs = freqs.repeat_interleave(2, dim=-1)",
                "transformer_blocks.0.attn1",  # RoPE3D lives in the attention processor, not a module
            ),
            Planted(
                "the caption's padding mask with its polarity inverted",
                "opensora/models/diffusion/opensora_v1_3/modeling_opensora.py",
                "(1 - encoder_attention_mask.to(self.dtype)) * -10000.0",
                "encoder_attention_mask.to(self.dtype) * -10000.0",
                "(model)",
            ),
        ),
    ),
]


MODELS += [
    Model(
        "internvl-flash",
        "InternVL chat as it runs (use_flash_attn=True, bfloat16): InternViT's flash-attn varlen and "
        "InternLM2's flash-attention-2 on the original side's flash-attn stand-in",
        INTERNVL,
        "internvl_chat/internvl",
        "internvl_chat.py",
        MODELS[0].needs,
        (
            Planted(
                "the ViT's flash attention (npu-migrate's varlen helper) scaled by d ** -0.45",
                "internvl/model/internvl_chat/modeling_intern_vit.py",
                "scale=q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale,",
                "scale=q.shape[-1] ** -0.45 if softmax_scale is None else softmax_scale,",
                "vision_model.encoder.layers.0.attn.inner_attn",
            ),
            Planted(  # (an inverted compressed mask itself is refused, by torch_npu and the emulation)
                "InternLM2's causal flag read inverted in the mask for npu_fusion_attention: tokens see "
                "the ones after them",
                "internvl/model/internlm2/modeling_internlm2.py",
                "right = 0 if causal else right",
                "right = 0 if not causal else right",
                "language_model.model.layers.0.attention",
            ),
            MODELS[0].planted[1],
        ),
        function="build_flash",
    ),
    Model(
        "wan2.1-dit",
        "Wan2.1's video DiT: FA3 else flash-attn 2 over packed lengths in bfloat16, q asserted on CUDA; "
        "the original runs on npu-migrate's flash-attn stand-ins, its assert answered",
        WAN_2_1,
        "wan",
        "wan_dit.py",
        "diffusers==0.31.0",
        (
            Planted(
                "the fused varlen attention scaled by d ** -0.45, not d ** -0.5",
                "wan/modules/attention.py",
                "scale=q.shape[-1] ** -0.5 if softmax_scale is None",
                "scale=q.shape[-1] ** -0.45 if softmax_scale is None",
                "blocks.0.self_attn",
            ),
            Planted(
                "the padded video tokens read: the self-attention's lengths dropped",
                "wan/modules/model.py",
                "            k_lens=seq_lens,\n",
                "            k_lens=None,\n",
                "blocks.0.self_attn",
            ),
        ),
    ),
    Model(
        "hunyuanvideo-dit",
        "HunyuanVideo's dual/single-stream video DiT under bf16 autocast: flash-attn varlen over text "
        "lengths built on 'cuda' (answered on the original side), a token refiner with a boolean mask",
        HUNYUAN_VIDEO,
        "hyvideo",
        "hunyuan_video_dit.py",
        "diffusers==0.31.0 loguru",
        (
            Planted(
                "the fused varlen attention scaled by d ** -0.45, not d ** -0.5",
                "hyvideo/modules/attenion.py",
                '"TND", scale=q.shape[-1] ** -0.5,',
                '"TND", scale=q.shape[-1] ** -0.45,',
                "transformer.double_blocks.0",
            ),
            Planted(
                "the token refiner's padding mask with its polarity inverted",
                "hyvideo/modules/token_refiner.py",
                "self_attn_mask = (self_attn_mask_1 & self_attn_mask_2).bool()",
                "self_attn_mask = ~(self_attn_mask_1 & self_attn_mask_2).bool()",
                "transformer.txt_in.individual_token_refiner",
            ),
        ),
    ),
]


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "npu_migrate", *map(str, args)], capture_output=True, text=True, check=False
    )


def build_tree(model: Model, root: Path) -> Path:
    """The model's package as its project has it, with the entry beside it."""
    package = checkout(model.snapshot) / model.package
    tree = root / "tree"
    shutil.copytree(package, tree / package.name)
    shutil.copy(ENTRIES / model.entry, tree / "entry.py")
    return tree


def verified(*args: str | Path, report: Path, function: str = "build") -> tuple[dict, float, str]:
    started = time.monotonic()
    done = cli("verify", *args, "--entry", f"entry.py:{function}", "--steps", "3", "--json", report)
    seconds = time.monotonic() - started
    data = json.loads(report.read_text()) if report.exists() else {}
    return data, seconds, done.stdout[-3000:] + done.stderr[-3000:]


def measure(model: Model) -> bool:
    print(f"\n{model.name}: {model.kind}")
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch).resolve()
        tree = build_tree(model, root)
        data, seconds, output = verified(
            tree, "--unsafe", report=root / "correct.json", function=model.function
        )
        if not data:
            print(f"  verify did not report:\n{output}")
            return False
        fused = ", ".join(f"{k} x{v}" for k, v in data["migrated"]["fused_calls"].items()) or "-"
        changes = ", ".join(f"{k} x{v}" for k, v in data["changes"].items())
        steps = [step["passed"] for step in data["steps"]]
        verdict = "PASS" if data["passed"] else "FAIL"
        print(
            f"  verify TREE --unsafe --steps 3: {verdict} in {seconds:.0f} s; "
            f"{len(data['rows'])} module outputs, steps {steps}"
        )
        print(f"  changes: {changes}\n  fused operators run: {fused}")
        stood_in = ", ".join(data["original"].get("stand_ins", [])) or "-"
        print(f"  the original imported the stand-ins for: {stood_in}")
        for answer in data["original"].get("answered", []):
            print(f"  answered on the original side: {answer}")
        for problem in data["problems"]:
            print(f"  - {problem}")
        ok = data["passed"]
        migrated = root / "migrated"
        cli("apply", tree, "--unsafe", "--out", migrated)
        for index, plant in enumerate(model.planted):
            copy = root / f"planted-{index}"
            shutil.copytree(migrated, copy)
            target = copy / plant.file
            text = target.read_text(encoding="utf-8")
            if plant.old not in text:
                print(f"  planted '{plant.what}': {plant.old!r} is not in {plant.file}")
                ok = False
                continue
            target.write_text(text.replace(plant.old, plant.new, 1), encoding="utf-8")
            data, seconds, output = verified(
                "--original",
                tree,
                "--migrated",
                copy,
                report=root / f"p{index}.json",
                function=model.function,
            )
            blamed = data.get("first_divergence")
            found = not data.get("passed", True) and blamed == plant.module
            print(f"  planted: {plant.what}: {'found' if found else 'NOT FOUND'} in {seconds:.0f} s; "
                  f"blamed {blamed} (expected {plant.module})")  # fmt: skip
            ok = ok and found
    return ok


def main() -> int:
    return by_model.run(
        __doc__ or "", MODELS, measure, lambda model: f"{model.name} needs on PYTHONPATH: {model.needs}"
    )


if __name__ == "__main__":
    sys.exit(main())
