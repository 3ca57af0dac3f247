"""The fused swaps `apply --unsafe` makes on real models, run: each model's published package is
migrated (`apply --unsafe`, then the hand edits a manual finding asks for, if any) and trained
three steps beside the original (`verify --original --migrated --steps 3`, the tight rule on
the emulation), and verify counts the fused operators the migrated side called.

    python -m benchmarks.fused_models [--only NAME ...]

Per model: the fused swaps made in the model's own files (by rule), held (by reason) and
reported (`scan --format json` on the package); the fused operators the migrated side ran; of
the swaps made, those that carry a run-time guard, and what the guards said as the model ran
(per guarded site: the fused path, or the original and why); the swaps whose operator never ran
(the entry's code path does not reach them, or their guard kept the original every time: the
comparison says nothing of their operator); the fused operators a human port of the model runs
(Ascend's own ports) that the migrated side did not (missed); and verify's verdict on the
forward (every module) and on each step. Exits 1 when a verdict fails or a model's made swaps
include none that ran.

The entries are tests/real_models/entries/; the sources are pinned by sha256 or commit
(tests/sources.py; the git mirrors by `fetch github:OWNER/NAME`). Each model's imports must be
importable by the Python that runs this: transformers 4.30 and diffusers 0.21 with
huggingface_hub 0.25 (diffusers 0.21 imports `cached_download`) and no tokenizers
(transformers 4.30 refuses a newer one); timm with torchvision and Qwen2-VL with tokenizers
0.20 from the second environment (`pip install torch==2.14.1 torchvision==0.29.1`, npu-migrate
without extras, onnx, numpy), one `--only` at a time; megatron-core and Wan2.1 (with the
pinned diffusers 0.31 wheel, put on its path here) in either.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from benchmarks import by_model
from npu_migrate.rules.load import load_rules
from tests.sources import (
    DIFFUSERS,
    DIFFUSERS_0_21,
    MEGATRON_CORE,
    TIMM,
    TRANSFORMERS_4_30,
    TRANSFORMERS_4_46,
    WAN_2_1,
    Release,
    Snapshot,
    checkout,
    fetch,
)

ENTRIES = Path(__file__).resolve().parent.parent / "tests" / "real_models" / "entries"
# the rules whose swaps carry a run-time guard: a fix's guard (a statements rule's goes around
# the statements), or one its template or a helper it writes calls (the RMSNorm forwards keep
# their body under it; NpuRMSNorm's forward and npu_complex_rotary ask it)
GUARDED = frozenset(
    rule.code
    for rule in load_rules()
    if rule.fix is not None
    and (
        rule.fix.guard
        or any(
            "why_not_npu_" in code for code in [rule.fix.template or "", *(rule.fix.helpers or {}).values()]
        )
    )
)

HELPERS = {
    rule.code: frozenset(rule.fix.helpers or {}) for rule in load_rules() if rule.fix is not None
}  # what each rule's fix writes into a file, by name


@dataclass(frozen=True)
class HandEdit:
    """What a manual finding asks a human to change in the migrated copy, done before the run."""

    file: str  # relative to the migrated tree
    text: str
    replacement: str
    why: str


@dataclass(frozen=True)
class Model:
    name: str
    kind: str  # what it stands for, in words
    source: Release | Snapshot
    package: str  # the importable folder inside the source
    files: tuple[str, ...]  # the model's own files, relative to the package's parent
    entry: str  # a file in tests/real_models/entries
    needs: str
    # the fused operators a human port of the model runs (Ascend's ports, named beside each)
    expected: frozenset[str]
    env: tuple[tuple[str, str], ...] = ()
    path: tuple[Release, ...] = ()  # wheels the model imports, put on its PYTHONPATH
    hand_edits: tuple[HandEdit, ...] = ()


TIMM_FILES = tuple(
    f"timm/models/{name}.py" for name in ("cait", "convit", "swin_transformer", "twins", "beit", "visformer")
)
OLD_HUB = "huggingface_hub==0.25.2, no tokenizers"
NEW_STACK = "torch 2.14.1, torchvision 0.29.1, tokenizers 0.20, huggingface_hub 0.25"
# the operators Ascend's ports run: ModelZoo's LLaMA and Qwen2-VL (RMSNorm, RoPE, attention),
# its Stable Diffusion (attention, GEGLU) and vision transformers (attention); MindSpeed's
# Megatron (attention, RoPE, RMSNorm, SwiGLU); Wan2.1's NPU patches (attention, RMSNorm, RoPE
# by npu_rotary_mul in interleave mode)
LLM = frozenset({"npu_fusion_attention", "npu_rms_norm", "npu_rotary_mul"})
ATTENTION = frozenset({"npu_fusion_attention"})
# MindSpeed runs Megatron's jit_fuser functions eagerly (its dummy_jit): torch.compile's Inductor
# needs triton-ascend on the NPU (NPU810 reports the line)
EAGER_JIT = HandEdit(
    "megatron/core/jit.py",
    "    jit_fuser = torch.compile\n",
    "    jit_fuser = lambda function: function  # noqa: E731\n",
    "NPU810: Inductor needs triton-ascend on the NPU; MindSpeed runs these functions eagerly",
)

MODELS = [
    Model("llama-4.30", "Hugging Face LLaMA before SDPA (eager attention, rotate_half RoPE, RMSNorm)",
          TRANSFORMERS_4_30, ".", ("transformers/models/llama/",), "transformers_llama.py", OLD_HUB,
          LLM),
    Model("llama-4.46-sdpa", "Hugging Face LLaMA of the SDPA era (transformers 4.46, SDPA attention)",
          TRANSFORMERS_4_46, ".", ("transformers/models/llama/",), "transformers_llama.py", NEW_STACK,
          LLM, (("LLAMA_ATTN", "sdpa"),)),
    Model("sd-unet-0.21", "diffusers 0.21's Stable Diffusion UNet (AttnProcessor2_0 attention)",
          DIFFUSERS_0_21, ".", ("diffusers/models/",), "diffusers_unet_0_21.py", OLD_HUB,
          ATTENTION | {"npu_geglu"}),
    Model("timm-zoo-sdpa", "six timm 1.0.15 vision transformers, SDPA branches", TIMM, "timm", TIMM_FILES,
          "timm_zoo.py", NEW_STACK, ATTENTION, (("TIMM_FUSED_ATTN", "1"),)),
    Model("timm-zoo-eager", "the same zoo, eager branches (TIMM_FUSED_ATTN=0)", TIMM, "timm", TIMM_FILES,
          "timm_zoo.py", NEW_STACK, ATTENTION, (("TIMM_FUSED_ATTN", "0"),)),
    Model("qwen2-vl-4.46", "Qwen2-VL (transformers 4.46): vision RoPE, mrope decoder, RMSNorm; eager",
          TRANSFORMERS_4_46, ".", ("transformers/models/qwen2_vl/",), "transformers_qwen2_vl.py", NEW_STACK,
          LLM),
    Model("qwen2-vl-4.46-flash", "the same, vision attention by VisionFlashAttention2 (flash_attn_varlen)",
          TRANSFORMERS_4_46, ".", ("transformers/models/qwen2_vl/",), "transformers_qwen2_vl.py", NEW_STACK,
          LLM, (("QWEN2_VL_VISION_ATTN", "flash_attention_2"),)),
    Model("megatron-gpt-0.12.1", "megatron-core 0.12.1's GPT layers, local spec: core attention by "
          "baddbmm, fused softmax and bmm; RoPE; torch RMSNorm; SwiGLU", MEGATRON_CORE, ".",
          ("megatron/core/",), "megatron_gpt.py", "either environment",
          LLM | {"npu_swiglu"}, hand_edits=(EAGER_JIT,)),
    Model("wan2.1-dit", "Wan2.1's video DiT: flash-attn varlen attention in bfloat16, RMSNorm, complex "
          "RoPE", WAN_2_1, "wan", ("wan/modules/",), "wan_dit.py", "diffusers 0.31 (put on its path)",
          LLM, path=(DIFFUSERS,)),
]  # fmt: skip


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "npu_migrate", *args]
    return subprocess.run(command, capture_output=True, text=True, check=False, env=env)


def build_tree(model: Model, root: Path) -> Path:
    """The package as published, with the entry beside it."""
    top = checkout(model.source) if isinstance(model.source, Snapshot) else fetch(model.source)
    package = (top / model.package).resolve()
    tree = root / "tree"
    shutil.copytree(package, tree / package.name)
    shutil.copy(ENTRIES / model.entry, tree / "entry.py")
    return tree


def fused_findings(tree: Path, model: Model) -> list[dict]:
    """The fused rules' findings in the model's own files."""
    fused = {r.code for r in load_rules() if r.category == "fused"}
    scan = cli("scan", str(tree), "--format", "json", "--no-cache")
    findings = json.loads(scan.stdout)["findings"] if scan.stdout.strip() else []
    own = [
        f for f in findings if any(Path(f["file"]).resolve().is_relative_to(tree / p) for p in model.files)
    ]
    return [f for f in own if f["code"] in fused]


def migrate(model: Model, tree: Path, migrated: Path) -> str:
    """`apply --unsafe` into `migrated`, then the model's hand edits; what went wrong, or ''."""
    applied = cli("apply", str(tree), "--unsafe", "--out", str(migrated), "--no-change-list")
    if applied.returncode not in (0, 1):
        return f"apply failed:\n{applied.stderr[-2000:]}"
    for edit in model.hand_edits:
        path = migrated / edit.file
        text = path.read_text(encoding="utf-8")
        if text.count(edit.text) != 1:
            return f"hand edit not applicable ({edit.why}): {edit.text!r} not once in {edit.file}"
        path.write_text(text.replace(edit.text, edit.replacement), encoding="utf-8")
        print(f"  hand edit in {edit.file}: {edit.why}")
    return ""


def measure(model: Model) -> bool:
    with tempfile.TemporaryDirectory() as scratch:
        tree = build_tree(model, Path(scratch).resolve())
        findings = fused_findings(tree, model)
        migrated = Path(scratch).resolve() / "migrated"
        failed = migrate(model, tree, migrated)
        if failed:
            print(f"{model.name}: {failed}")
            return False
        report = Path(scratch) / "verify.json"
        path = os.pathsep.join(
            [*(str(fetch(wheel).parent) for wheel in model.path), os.environ.get("PYTHONPATH", "")]
        )
        env = {**os.environ, **dict(model.env), "PYTHONPATH": path.rstrip(os.pathsep)}
        started = time.monotonic()
        done = cli("verify", "--original", str(tree), "--migrated", str(migrated),
                   "--entry", "entry.py:build", "--steps", "3", "--json", str(report), env=env)  # fmt: skip
        seconds = time.monotonic() - started
        if not report.exists():
            print(f"{model.name}: verify did not report:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
            return False
        data = json.loads(report.read_text())
        for finding in findings:
            finding["site"] = _site(tree, finding)
    made = [f for f in findings if outcome(f) == "made"]
    guarded = [f for f in made if f["code"] in GUARDED]
    held = Counter(held_reason(f) for f in findings if outcome(f) == "held")
    reported = Counter(f["code"] for f in findings if outcome(f) == "reported")
    ran = data["migrated"]["fused_calls"]
    sites = data["migrated"]["fused_sites"]
    not_run = [f for f in made if not _ran(f, sites)]
    missed = sorted(model.expected - set(ran))
    steps = [s["passed"] for s in data["steps"]]
    verdict = "PASS" if data["passed"] else "FAIL: " + "; ".join(data["problems"])
    print(f"\n{model.name}: {model.kind}")
    print(f"  made {len(made)} ({_counts(Counter(f['code'] for f in made))}), held {sum(held.values())} "
          f"({_counts(held)}), reported {sum(reported.values())} ({_counts(reported)})")  # fmt: skip
    print(f"  fused operators run: {_counts(Counter(ran))}; {len(made) - len(not_run)} of "
          f"{len(made)} made swaps ran (by the function they are in, or the helper they call)")  # fmt: skip
    runs = data["migrated"].get("guarded", {})
    fell_back = sum((Counter(outcomes) for outcomes in runs.values()), Counter[str]())
    fused_runs = fell_back.pop("fused", 0)
    print(f"  guarded swaps {len(guarded)} of {len(made)} made; at run time {len(runs)} guarded sites: "
          f"fused {fused_runs}, fell back {sum(fell_back.values())} ({_counts(fell_back)})")  # fmt: skip
    for finding in not_run:
        print(
            f"  made, its operator never ran (off the entry's path, or its guard kept the original): "
            f"{finding['code']} in {finding['site']}, line {finding['line']}"
        )
    print(f"  missed (a human port runs them, the migration does not): {', '.join(missed) or '-'}")
    print(f"  verify: {verdict}; {len(data['rows'])} module outputs, steps {steps}, {seconds:.0f} s")
    return data["passed"] and len(not_run) < len(made)


def outcome(finding: dict) -> str:
    """What `apply --unsafe` does with a fused finding: made, held or reported."""
    if finding["held"]:
        return "held"
    return "made" if finding["replacement"] is not None else "reported"


def held_reason(finding: dict) -> str:
    return finding["held_reason"] or finding["held"]


@functools.cache
def _parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _ran(finding: dict, sites: dict[str, int]) -> bool:
    """Whether the function a swap was made in called a fused operator, or a helper its rule
    writes into the file did (`dot_product_attention.py:npu_core_attention`,
    `torch_norm.py:NpuRMSNorm.forward`): a swap that calls a helper, or builds a class that is
    one, runs its operator there."""
    file = finding["site"].partition(":")[0]
    called = {site.partition(":")[2].partition(".")[0] for site in sites if site.partition(":")[0] == file}
    return finding["site"] in sites or bool(called & HELPERS.get(finding["code"], frozenset()))


def _site(tree: Path, finding: dict) -> str:
    """`path/in/tree.py:Class.method` of the function a finding is in, as verify names the
    callers of fused operators (Python's qualified name of the code object)."""
    path = Path(finding["file"]).resolve()
    module = _parsed(path)
    names: list[str] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inside = child.lineno <= finding["line"] <= (child.end_lineno or child.lineno)
                if inside:
                    name = prefix + child.name
                    if not isinstance(child, ast.ClassDef):
                        names.append(name)
                    visit(child, name + (".<locals>." if not isinstance(child, ast.ClassDef) else "."))

    visit(module, "")
    return f"{path.relative_to(tree).as_posix()}:{names[-1] if names else '<module>'}"


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{key} x{n}" for key, n in sorted(counter.items())) or "-"


def main() -> int:
    return by_model.run(__doc__ or "", MODELS, measure)


if __name__ == "__main__":
    raise SystemExit(main())
