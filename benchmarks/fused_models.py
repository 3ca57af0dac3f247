"""The fused swaps `apply --unsafe` makes on real models, run: each model's published package is
migrated and trained three steps beside the original (`verify TREE --unsafe --steps 3`, the
tight rule on the emulation), and verify counts the fused operators the migrated side called.

    python -m benchmarks.fused_models [--only NAME ...]

Per model: the fused swaps made in the model's own files (by rule), held (by reason) and
reported (`scan --format json` on the package); the fused operators the migrated side ran; of
the swaps made, those that carry a run-time guard, and what the guards said as the model ran
(per guarded site: the fused path, or the original and why); the
swaps whose operator never ran (the entry's code path does not reach them: the comparison says
nothing of them); and verify's verdict on the forward (every module) and on each step. Exits 1
when a verdict fails or a model's made swaps include none that ran.

The entries are tests/real_models/entries/; the sources are pinned by sha256 (tests/sources.py).
Each model's imports must be importable by the Python that runs this: transformers 4.30 and
diffusers 0.21 with huggingface_hub 0.25 (diffusers 0.21 imports `cached_download`) and no
tokenizers (transformers 4.30 refuses a newer one); timm with torchvision and Qwen2-VL with
tokenizers 0.20 from the second environment (`pip install torch==2.14.1 torchvision==0.29.1`,
npu-migrate without extras, onnx, numpy), one `--only` at a time.
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
from tests.sources import DIFFUSERS_0_21, TIMM, TRANSFORMERS_4_30, TRANSFORMERS_4_46, Release, fetch

ENTRIES = Path(__file__).resolve().parent.parent / "tests" / "real_models" / "entries"
# the rules whose swaps carry a run-time guard: a fix's guard (a statements rule's goes around
# the statements), or one its template calls (the RMSNorm forwards keep their body under it)
GUARDED = frozenset(
    rule.code
    for rule in load_rules()
    if rule.fix is not None and (rule.fix.guard or "why_not_npu_" in (rule.fix.template or ""))
)


@dataclass(frozen=True)
class Model:
    name: str
    kind: str  # what it stands for, in words
    release: Release
    package: str  # the importable folder inside fetch(release)
    files: tuple[str, ...]  # the model's own files, relative to the package's parent
    entry: str  # a file in tests/real_models/entries
    needs: str
    env: tuple[tuple[str, str], ...] = ()


TIMM_FILES = tuple(
    f"timm/models/{name}.py" for name in ("cait", "convit", "swin_transformer", "twins", "beit", "visformer")
)
OLD_HUB = "huggingface_hub==0.25.2, no tokenizers"
NEW_STACK = "torch 2.14.1, torchvision 0.29.1, tokenizers 0.20, huggingface_hub 0.25"

MODELS = [
    Model("llama-4.30", "Hugging Face LLaMA before SDPA (eager attention, rotate_half RoPE, RMSNorm)",
          TRANSFORMERS_4_30, ".", ("transformers/models/llama/",), "transformers_llama_4_30.py", OLD_HUB),
    Model("sd-unet-0.21", "diffusers 0.21's Stable Diffusion UNet (AttnProcessor2_0 attention)",
          DIFFUSERS_0_21, ".", ("diffusers/models/",), "diffusers_unet_0_21.py", OLD_HUB),
    Model("timm-zoo-sdpa", "six timm 1.0.15 vision transformers, SDPA branches", TIMM, "timm", TIMM_FILES,
          "timm_zoo.py", NEW_STACK, (("TIMM_FUSED_ATTN", "1"),)),
    Model("timm-zoo-eager", "the same zoo, eager branches (TIMM_FUSED_ATTN=0)", TIMM, "timm", TIMM_FILES,
          "timm_zoo.py", NEW_STACK, (("TIMM_FUSED_ATTN", "0"),)),
    Model("qwen2-vl-4.46", "Qwen2-VL (transformers 4.46): vision RoPE, mrope decoder, RMSNorm; eager",
          TRANSFORMERS_4_46, ".", ("transformers/models/qwen2_vl/",), "transformers_qwen2_vl.py", NEW_STACK),
    Model("qwen2-vl-4.46-flash", "the same, vision attention by VisionFlashAttention2 (flash_attn_varlen)",
          TRANSFORMERS_4_46, ".", ("transformers/models/qwen2_vl/",), "transformers_qwen2_vl.py", NEW_STACK,
          (("QWEN2_VL_VISION_ATTN", "flash_attention_2"),)),
]  # fmt: skip


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "npu_migrate", *args]
    return subprocess.run(command, capture_output=True, text=True, check=False, env=env)


def build_tree(model: Model, root: Path) -> Path:
    """The package as published, with the entry beside it."""
    package = (fetch(model.release) / model.package).resolve()
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


def measure(model: Model) -> bool:
    with tempfile.TemporaryDirectory() as scratch:
        tree = build_tree(model, Path(scratch).resolve())
        findings = fused_findings(tree, model)
        report = Path(scratch) / "verify.json"
        env = {**os.environ, **dict(model.env)}
        started = time.monotonic()
        done = cli("verify", str(tree), "--entry", "entry.py:build", "--unsafe", "--steps", "3",
                   "--json", str(report), env=env)  # fmt: skip
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
    not_run = [f for f in made if f["site"] not in sites]
    steps = [s["passed"] for s in data["steps"]]
    verdict = "PASS" if data["passed"] else "FAIL: " + "; ".join(data["problems"])
    print(f"\n{model.name}: {model.kind}")
    print(f"  made {len(made)} ({_counts(Counter(f['code'] for f in made))}), held {sum(held.values())} "
          f"({_counts(held)}), reported {sum(reported.values())} ({_counts(reported)})")  # fmt: skip
    print(f"  fused operators run: {_counts(Counter(ran))}; {len(made) - len(not_run)} of "
          f"{len(made)} made swaps ran (by the function they are in)")  # fmt: skip
    runs = data["migrated"].get("guarded", {})
    fell_back = sum((Counter(outcomes) for outcomes in runs.values()), Counter[str]())
    fused_runs = fell_back.pop("fused", 0)
    print(f"  guarded swaps {len(guarded)} of {len(made)} made; at run time {len(runs)} guarded sites: "
          f"fused {fused_runs}, fell back {sum(fell_back.values())} ({_counts(fell_back)})")  # fmt: skip
    for finding in not_run:
        print(
            f"  made, not on the entry's path: {finding['code']} in {finding['site']}, line {finding['line']}"
        )
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
