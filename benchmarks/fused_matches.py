"""How often each fused-operator rule matches real code, and how often its guard holds it: the
figure that tells a rule written to its own examples from one that finds real code.

    python benchmarks/fused_matches.py [--mirrors DIR] [--only NAME ...] [--jobs N]

Each repository is a bare git mirror (the library's `fetch` brings them to /work/.mirror),
checked out as benchmarks/real_repos.py does and scanned with the catalog (`scan --format
json`). Prints one line per rule of the fused category: the fixes `apply --unsafe` would make,
those held (by reason), the report-only findings, and the repositories it matched in; then the
rules that matched nothing, and the eager-attention score products (`s = q @ k.transpose(...)`,
`torch.matmul(q, k.transpose(...))`) that no statements rule matched: the forms still missed."""

from __future__ import annotations

import json
import re
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

from benchmarks.real_repos import cli, clone, mirrors_asked, watched
from npu_migrate.rules.load import load_rules

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


def main() -> None:
    mirrors, args = mirrors_asked()
    fused = {r.code: r for r in load_rules() if r.category == "fused"}
    made: Counter[str] = Counter()
    reported: Counter[str] = Counter()
    held: dict[str, Counter[str]] = defaultdict(Counter)
    where: dict[str, set[str]] = defaultdict(set)
    missed: Counter[str] = Counter()
    statement_rules = {r.code for r in fused.values() if "statements" in r.model_dump()["match"]}
    for mirror in mirrors:
        with tempfile.TemporaryDirectory() as scratch:
            tree, _ = clone(mirror, Path(scratch))
            _, _, _, out = watched(cli("scan", str(tree), "--format", "json", "-j", args.jobs, "--no-cache"))
            scores = score_lines(tree)
        findings = json.loads(out)["findings"] if out.strip() else []
        spans = [(f["file"], f["line"], f["end_line"]) for f in findings if f["code"] in statement_rules]
        matched = {(file, line) for file, first, last in spans for line in range(first, last + 1)}
        missed[mirror.parent.name] = len(scores - matched)
        for finding in findings:
            code = finding["code"]
            if code not in fused:
                continue
            where[code].add(mirror.parent.name)
            if finding["held"]:
                held[code][finding["held_reason"] or finding["held"]] += 1
            elif finding["replacement"] is not None:
                made[code] += 1
            else:
                reported[code] += 1
        print(f"scanned {mirror.parent.name}", flush=True)
    print(f"\n{len(mirrors)} repositories; per fused rule: made, held (by reason), reported, where")
    for code, rule in sorted(fused.items()):
        if code not in where:
            continue
        reasons = ", ".join(f"{reason}: {n}" for reason, n in held[code].most_common()) or "-"
        print(
            f"{code} {rule.name}: made {made[code]}, held {sum(held[code].values())} ({reasons}), "
            f"reported {reported[code]}; in {', '.join(sorted(where[code]))}"
        )
    silent = sorted(code for code in fused if code not in where)
    print(f"{len(silent)} of {len(fused)} fused rules matched nothing: {', '.join(silent)}")
    print(
        f"eager-attention score products no statements rule matched: {sum(missed.values())} ("
        + ", ".join(f"{name}: {n}" for name, n in missed.most_common() if n)
        + ")"
    )


if __name__ == "__main__":
    main()
