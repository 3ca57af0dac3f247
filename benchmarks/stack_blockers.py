"""The blockers census of issue 41, on the real stacks pinned in tests/sources.py (Megatron-LM
core_v0.12.1 with its launch scripts, Wan2.1, HunyuanVideo, sam2, flux, LTX-Video): every
place that stops a migrated project on an NPU host, found by patterns written here, apart from
the rules (a CUDA extension module's import, Transformer Engine's, flash-attn's imports and
calls, a CUDA tensor type string, a device property with no NPU meaning, a library call whose
device defaults to "cuda", a launch script's NCCL backend), and what `npu-migrate scan` says at
each: reported (a manual finding, a note or a held fix at the statement: a human must look),
rewritten (only fixes there, safe or unsafe), or silent (nothing). The goal is 0 silent. Examples
in docstrings are prose, not counted.

    python benchmarks/stack_blockers.py [--show]

Prints one row per project and kind, then the silent places (all of them with --show); the
trees come from the git mirrors (`fetch github:OWNER/NAME`). Always exits 0."""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

from tests.sources import (
    FLUX,
    HUNYUAN_VIDEO,
    LTX_VIDEO,
    MEGATRON_LM,
    MEGATRON_LM_EXAMPLES,
    SAM2,
    WAN_2_1,
    Snapshot,
    checkout,
)

PROJECTS: dict[str, tuple[Snapshot, ...]] = {
    "Megatron-LM": (MEGATRON_LM, MEGATRON_LM_EXAMPLES),
    "Wan2.1": (WAN_2_1,),
    "HunyuanVideo": (HUNYUAN_VIDEO,),
    "sam2": (SAM2,),
    "flux": (FLUX,),
    "LTX-Video": (LTX_VIDEO,),
}
IMPORT = r"^\s*(?:import|from)\s+"
PYTHON = {
    "CUDA extension import": re.compile(IMPORT + r"(?:[\w.]*\.)?(?:\w+_cuda\w*|amp_C|grouped_gemm)\b"),
    "Transformer Engine import": re.compile(IMPORT + r"transformer_engine\b"),
    "flash-attn import": re.compile(IMPORT + r"flash_attn(?:_interface)?\b"),
    "flash-attn call": re.compile(
        r"(?<!def )\b(?:flash_attn_(?:varlen_)?(?:qkvpacked_|kvpacked_)?func|flash_attn_with_kvcache|"
        r"_flash_attn_forward|_flash_attn_backward)\s*\("
    ),
    "CUDA type string": re.compile(r"[\"']torch\.cuda\.\w*Tensor[\"']"),
    "device property field": re.compile(
        r"get_device_properties\([^)]*\)\.(?:major|minor)\b|get_device_capability\s*\("
    ),
    '"cuda" library default': re.compile(r"\.enable_(?:sequential|model)_cpu_offload\s*\("),
}
SHELL = {"NCCL backend flag": re.compile(r"--[\w-]*backend[= ]+nccl\b")}


def statements(path: Path) -> dict[int, tuple[int, int] | None]:
    """Each line -> the lines of the innermost statement holding it (the line alone where Python
    cannot read the file); a line of prose (a docstring, another string of several lines) -> None."""
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError):
        return {}
    spans: dict[int, tuple[int, int] | None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.end_lineno != node.lineno:
            spans.update(dict.fromkeys(range(node.lineno, (node.end_lineno or node.lineno) + 1)))
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and not isinstance(
            node, ast.FunctionDef | ast.ClassDef | ast.If | ast.Try
        ):
            end = node.end_lineno or node.lineno
            for line in range(node.lineno, end + 1):
                if line in spans and spans[line] is None:
                    continue  # prose
                held = spans.get(line)
                if held is None or held[1] - held[0] > end - node.lineno:
                    spans[line] = (node.lineno, end)
    return spans


def places(tree: Path) -> list[tuple[str, Path, int, str]]:
    """(kind, file, line, text) of every blocker the patterns find, comments aside."""
    found = []
    for path in sorted(tree.rglob("*")):
        patterns = PYTHON if path.suffix == ".py" else SHELL if path.suffix == ".sh" else None
        if patterns is None or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            code = line.split("#", 1)[0]
            for kind, pattern in patterns.items():
                if pattern.search(code):
                    found.append((kind, path, number, line.strip()))
    return found


def scan(tree: Path) -> dict[Path, list[tuple[int, str]]]:
    """What the scan says: each file's findings, as (line, label)."""
    done = subprocess.run(
        [sys.executable, "-m", "npu_migrate", "scan", str(tree), "--format", "json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    said: dict[Path, list[tuple[int, str]]] = {}
    for finding in json.loads(done.stdout)["findings"]:
        said.setdefault((tree / finding["file"]).resolve(), []).append((finding["line"], finding["label"]))
    return said


def verdict(findings: list[tuple[int, str]], span: tuple[int, int]) -> str:
    """A report at the statement (a human must look) before a fix; nothing at all is silent."""
    labels = {label for line, label in findings if span[0] <= line <= span[1]}
    if labels - {"safe", "unsafe"}:
        return "reported"
    return "rewritten" if labels else "silent"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--show", action="store_true", help="list every silent place")
    show = parser.parse_args().show
    print(f"{'project':14} {'kind':28} {'places':>6} {'rewritten':>9} {'reported':>8} {'silent':>6}")
    silent: list[str] = []
    for project, snapshots in PROJECTS.items():
        counts: Counter[tuple[str, str]] = Counter()
        for snapshot in snapshots:
            tree = checkout(snapshot)
            said = scan(tree)
            for kind, path, line, text in places(tree):
                span = statements(path).get(line, (line, line)) if path.suffix == ".py" else (line, line)
                if span is None:
                    continue  # in a docstring's example, not code
                outcome = verdict(said.get(path.resolve(), []), span)
                counts[kind, outcome] += 1
                if outcome == "silent":
                    silent.append(f"{project}: {path.relative_to(tree)}:{line}: {kind}: {text[:80]}")
        for kind in sorted({k for k, _ in counts}):
            row = [counts[kind, outcome] for outcome in ("rewritten", "reported", "silent")]
            print(f"{project:14} {kind:28} {sum(row):>6} {row[0]:>9} {row[1]:>8} {row[2]:>6}", flush=True)
    print(f"\n{len(silent)} silent place(s)")
    for place in silent if show else silent[:20]:
        print("  " + place)
    return 0


if __name__ == "__main__":
    sys.exit(main())
