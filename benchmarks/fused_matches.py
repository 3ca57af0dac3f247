"""How often each fused-operator rule matches real code, and how often its guard holds it: the
figure that tells a rule written to its own examples from one that finds real code.

    python -m benchmarks.fused_matches [--mirrors DIR] [--only NAME ...] [--jobs N]

The sources: every bare git mirror in DIR (the library's `fetch` brings them to /work/.mirror),
checked out as benchmarks/real_repos.py does; three releases pinned by sha256 (tests/sources.py):
transformers 4.30 and 4.46 (Hugging Face's LLMs before SDPA and with it, Qwen2-VL) and diffusers
0.21 (a Stable Diffusion pipeline's attention processors); and Ascend's own ports of public
models (LLaMA-13B, MiniGPT-4, GPT-NeoX, GLM-10B, DINO, BEiT v2, Chinese-CLIP, diffusers 0.18's
text-to-image training) from its ModelZoo at a pinned commit; and bowdpr, a retriever whose
launch scripts choose transformers' optimizer (`--optim adamw_apex_fused`); and mamba_training,
a LoRA fine-tune that asks TrainingArguments for it in Python (`optim='adamw_apex_fused'`). Each is
scanned with the catalog (`scan --format json`). Prints, per source, the fused swaps made, held
and reported, and the score products missed; then one line per fused rule: the fixes `apply
--unsafe` would make, those held (by reason), the report-only findings, and the sources it
matched in; then the rules that matched nothing, and the eager-attention score products
(`s = q @ k.transpose(...)`, `torch.matmul(q, k.transpose(...))`) that no statements rule
matched: the forms still missed."""

from __future__ import annotations

import json
import re
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

from benchmarks.fused_models import held_reason, outcome
from benchmarks.real_repos import cli, clone, mirrors_asked, watched
from npu_migrate.rules.load import load_rules
from tests.sources import (
    BOWDPR,
    DIFFUSERS_0_21,
    MAMBA_TRAINING,
    MODELZOO_PORTS,
    TRANSFORMERS_4_30,
    TRANSFORMERS_4_46,
    Release,
    Snapshot,
    checkout,
    fetch,
)

PINNED: dict[str, Release | Snapshot] = {
    "transformers-4.30.2": TRANSFORMERS_4_30,
    "transformers-4.46.3": TRANSFORMERS_4_46,
    "diffusers-0.21.4": DIFFUSERS_0_21,
    "ascend-modelzoo-ports": MODELZOO_PORTS,
    "bowdpr": BOWDPR,
    "mamba_training": MAMBA_TRAINING,
}

# A statement that computes attention scores as eager attention does (what a statements rule
# starts at): `attn = (q @ k.transpose(-2, -1)) * scale`, `torch.matmul(q, k.transpose(2, 3))`.
SCORES = re.compile(r"^[ \t]*\w+ = .*(?:@ *\(?\w+\.transpose\(|matmul\(\w+, *\w+\.transpose\()", re.M)


def score_lines(tree: Path) -> set[tuple[str, int]]:
    """Where the tree's Python files compute eager-attention scores: (file, line)."""
    found = set()
    for path in tree.rglob("*.py"):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        found |= {(str(path), text.count("\n", 0, m.start()) + 1) for m in SCORES.finditer(text)}
    return found


def _pinned(source: Release | Snapshot) -> Path:
    return fetch(source) if isinstance(source, Release) else checkout(source)


def main() -> None:
    mirrors, args = mirrors_asked()
    fused = {r.code: r for r in load_rules() if r.category == "fused"}
    made: Counter[str] = Counter()
    reported: Counter[str] = Counter()
    held: dict[str, Counter[str]] = defaultdict(Counter)
    where: dict[str, set[str]] = defaultdict(set)
    missed: Counter[str] = Counter()
    statement_rules = {r.code for r in fused.values() if "statements" in r.model_dump()["match"]}
    trees: list[tuple[str, Path | None]] = [(m.parent.name, m) for m in mirrors]
    trees += [(name, None) for name in PINNED if not args.only or name in args.only]
    per_source: list[str] = []
    for name, mirror in trees:
        with tempfile.TemporaryDirectory() as scratch:
            tree = clone(mirror, Path(scratch))[0] if mirror is not None else _pinned(PINNED[name])
            _, _, _, out = watched(cli("scan", str(tree), "--format", "json", "-j", args.jobs, "--no-cache"))
            scores = score_lines(tree)
        findings = json.loads(out)["findings"] if out.strip() else []
        spans = [(f["file"], f["line"], f["end_line"]) for f in findings if f["code"] in statement_rules]
        matched = {(file, line) for file, first, last in spans for line in range(first, last + 1)}
        missed[name] = len(scores - matched)
        counts: Counter[str] = Counter()
        for finding in findings:
            code = finding["code"]
            if code not in fused:
                continue
            where[code].add(name)
            fate = outcome(finding)
            counts[fate] += 1
            if fate == "held":
                held[code][held_reason(finding)] += 1
            else:
                (made if fate == "made" else reported)[code] += 1
        per_source.append(
            f"{name}: made {counts['made']}, held {counts['held']}, reported {counts['reported']}, "
            f"missed score products {missed[name]}"
        )
        print(f"scanned {name}", flush=True)
    print(f"\n{len(trees)} sources; per source: fused swaps made, held, reported, missed")
    print("\n".join(per_source))
    print("\nper fused rule: made, held (by reason), reported, where")
    for code, rule in sorted(fused.items()):
        if code not in where:
            continue
        reasons = ", ".join(f"{reason}: {n}" for reason, n in held[code].most_common()) or "-"
        print(
            f"{code} {rule.name}: made {made[code]}, held {sum(held[code].values())} ({reasons}), "
            f"reported {reported[code]}; in {', '.join(sorted(where[code]))}"
        )
    silent = sorted(code for code in fused if code not in where)
    named = f": {', '.join(silent)}" if silent else ""
    print(f"{len(silent)} of {len(fused)} fused rules matched nothing{named}")
    print(
        f"eager-attention score products no statements rule matched: {sum(missed.values())} ("
        + ", ".join(f"{name}: {n}" for name, n in missed.most_common() if n)
        + ")"
    )


if __name__ == "__main__":
    main()
