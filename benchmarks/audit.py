"""The "nothing silent" audit: after `apply`, is every CUDA trace left in the code rewritten or
reported? A scan of a migrated tree must be the user's complete to-do list.

    python benchmarks/audit.py TREE [TREE ...] [--unsafe] [--show N] [--jobs N]

For each TREE: `apply TREE --out COPY` (the original is never modified), then `scan COPY --format
json`, then every CUDA trace in COPY's code is looked up among the scan's findings by line. The
traces in Python are found here by Python's tokenizer, independently of the rule catalog (a
detector built from the rules would only find what the rules already know):
  * names: `cuda` and `is_cuda` (as in `torch.cuda`, `.cuda()`, `from torch import cuda`,
    `t.is_cuda`; not variables of the code's own named so), `cudnn` (TF32 switches go through
    `torch.backends.cuda` or `cudnn`), `set_float32_matmul_precision`, `NCCL`, `CUDAAccelerator`,
    `is_torch_cuda_available`; a definition (`def cuda(self)`), a keyword named so, a module of
    the code's own (`from .cuda import x`) or a name the tree defines itself (its own
    `class CUDAAccelerator`) is not one;
  * string literals whose whole text is a CUDA device or backend: `cuda`, `cuda:0`, `cuda:{}`
    (f-string fields read as `{}`), `gpu` (lowercase, as torch and the frameworks spell devices;
    "CUDA" and "GPU" are labels), `nccl` in any case and the `cpu:gloo,cuda:nccl` forms.
Comments, prose strings and messages (a literal passed to print, a logging method or an
exception) steer nothing and hold no traces. In the other files (scripts, Dockerfiles, Makefiles,
dependency files, YAML/JSON configs, C++/CUDA sources) a trace is a line that holds a CUDA name
(TEXT_TRACES) outside a whole-line comment.

Prints, per tree: files, traces before and after apply, and how many of those left carry a
finding on their line; then the silent ones by kind, and up to --show of them with their line.
Exits 1 when any trace is silent (it is then a to-do list for the rule catalog), else 0."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import tokenize
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

TRACE_NAMES = frozenset(
    {
        "cuda",
        "is_cuda",
        "cudnn",
        "set_float32_matmul_precision",
        "NCCL",
        "CUDAAccelerator",
        "is_torch_cuda_available",
    }
)
# Device strings are lowercase in torch and the frameworks ("CUDA", "GPU" are labels); backend
# names are not case-sensitive.
TRACE_STRING = re.compile(r"cuda(:(\d+|\{\}))?|gpu|(?i:nccl)|(cpu:gloo,)?cuda:nccl(,cpu:gloo)?")
# `cuda` and `is_cuda` are traces as attributes or imports (`torch.cuda`, `.cuda()`, `from torch
# import cuda`, `t.is_cuda`), not as variables of the code's own.
ATTRIBUTES_ONLY = frozenset({"cuda", "is_cuda"})
_FIELD = re.compile(r"\{[^{}]*\}")
# Calls whose arguments are messages: a literal printed or logged steers nothing.
MESSAGE_CALLS = frozenset(
    {"print", "debug", "info", "warning", "warn", "error", "exception", "critical", "log"}
    | {"ValueError", "RuntimeError", "TypeError", "NotImplementedError", "AssertionError"}
)


@dataclass(frozen=True)
class Trace:
    file: str  # relative to the tree
    line: int
    kind: str  # the name, or the string's text in quotes


def traces_in(source: str, file: str) -> list[Trace]:
    """The CUDA traces in one file's code (an empty list for a file that does not tokenize)."""
    found: list[Trace] = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return found
    code = [t for t in tokens if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE)]
    callees: list[str | None] = []  # per open bracket, the name called there
    for i, token in enumerate(code):
        if token.type == tokenize.OP and token.string in "([{":
            called = token.string == "(" and i and code[i - 1].type == tokenize.NAME
            callees.append(code[i - 1].string if called else None)
        elif token.type == tokenize.OP and token.string in ")]}" and callees:
            callees.pop()
        if token.type == tokenize.NAME and token.string in TRACE_NAMES:
            before = code[i - 1].string if i else ""
            after = code[i + 1].string if i + 1 < len(code) else ""
            if before in ("def", "class") or (after == "=" and before in ("(", ",")):
                continue
            if token.string in ATTRIBUTES_ONLY and before != "." and not _in_import(code, i):
                continue
            if _in_relative_import_path(code, i):
                continue  # `from .cuda import x`: a module of the code's own
            found.append(Trace(file, token.start[0], token.string))
        elif token.type == tokenize.STRING:
            text = _string_text(token.string)
            message = bool(callees) and callees[-1] in MESSAGE_CALLS
            if text is not None and not message and TRACE_STRING.fullmatch(text):
                found.append(Trace(file, token.start[0], repr(text.lower())))
    return found


def _in_import(code: list[tokenize.TokenInfo], i: int) -> bool:
    """Whether token i is in an import statement (the first token of its line is import/from)."""
    line = code[i].start[0]
    while i > 0 and code[i - 1].start[0] == line:
        i -= 1
    return code[i].string in ("import", "from")


def _in_relative_import_path(code: list[tokenize.TokenInfo], i: int) -> bool:
    """Whether token i is in the module path of a relative `from . import` statement."""
    line = code[i].start[0]
    j = i
    while j > 0 and code[j - 1].start[0] == line:
        j -= 1
    if code[j].string != "from" or j + 1 >= len(code) or not code[j + 1].string.startswith("."):
        return False
    return all(t.string != "import" for t in code[j:i])


def _string_text(literal: str) -> str | None:
    """A literal's text, f-string fields as `{}`; None for bytes."""
    prefix = re.match(r"[A-Za-z]*", literal)
    letters = prefix.group(0).lower() if prefix else ""
    if "b" in letters:
        return None
    body = literal[len(letters) :]
    quote = body[:3] if body[:3] in ('"""', "'''") else body[:1]
    body = body[len(quote) : len(body) - len(quote)]
    return _FIELD.sub("{}", body) if "f" in letters else body


# A class or function the tree defines itself: a name such as CUDAAccelerator is then the code's
# own (Lightning's own sources, a project's own accelerator family), not a library's API.
_DEFINITION = re.compile(r"^[ \t]*(?:class|def)[ \t]+(\w+)", re.MULTILINE)


def tree_traces(root: Path) -> list[Trace]:
    found: list[Trace] = []
    own: set[str] = set()
    for path in sorted(root.rglob("*")):
        kind = _text_kind(path.relative_to(root).as_posix())
        if not path.is_file() or path.is_symlink() or kind is None:
            continue
        source = path.read_bytes().decode("utf-8", errors="replace")
        name = path.relative_to(root).as_posix()
        if kind == "python":
            found += traces_in(source, name)
            own.update(_DEFINITION.findall(source))
        elif kind == "notebook":
            found += notebook_traces(source, name)
        else:
            found += line_traces(source, name, *TEXT_TRACES[kind])
    own -= ATTRIBUTES_ONLY  # `def cuda(self)` does not make `torch.cuda` the code's own
    return [t for t in found if t.kind not in own]


# A shell line (`!cmd` in a notebook, or a line of a %%bash cell) with a CUDA tool or variable.
SHELL_TRACE = re.compile(r"\bnvidia-smi\b|\bnvcc\b|\bCUDA_\w+|\bNCCL_\w+")
# Files that are not Python, per kind: what a trace is, how a whole-line comment starts, and what
# is text that steers nothing (a shell's single-quoted string: `echo '$CUDA_VISIBLE_DEVICES'`).
TEXT_TRACES = {
    "shell": (
        re.compile(SHELL_TRACE.pattern + r"|nvidia/cuda|(?<![\w-])cuda(:\d+)?(?![\w-])"),
        "#",
        re.compile(r"'[^']*'"),
    ),
    "dependencies": (
        re.compile(
            r"(?i)flash[-_]attn|xformers|bitsandbytes|\+cu\d+|/whl/cu\d+|cudatoolkit|pytorch-cuda|"
            r"\bnvidia[-_]|\btriton\b|\bapex\b|mamba[-_]ssm|causal[-_]conv1d|cupy"
        ),
        "#",
        None,
    ),
    "config": (re.compile(r"(?i):\s*[\"']?(nccl|MULTI_GPU|cuda(:\d+)?)[\"']?\s*(,|}|$)"), "#", None),
    "native": (re.compile(r"__global__|py::class_|\b\w+\s*\.\s*(def|impl)\(\s*\""), "//", None),
}


# A package's own name, or a group of extras named after a package, is not a use of it.
NOT_A_USE = re.compile(r"\s*(name\s*=|[\w-]+\s*=\s*\[\s*$)")


def _text_kind(name: str) -> str | None:
    """What the audit reads a file as, by its path in the tree (npu-migrate's own classification is not
    used: the audit must not inherit its blind spots)."""
    lower = Path(name).name.lower()
    if {".github", ".circleci", ".gitlab"} & set(Path(name).parts):
        return None  # CI workflows: not the model's configuration (as npu-migrate reads them)
    if lower.endswith((".py", ".ipynb")):
        return "python" if lower.endswith(".py") else "notebook"
    if lower.endswith((".sh", ".bash")) or lower.startswith(("dockerfile", "makefile")):
        return "shell"
    in_folder = re.search(r"(^|/)requirements/[^/]+\.(txt|in)$", name)
    if in_folder or re.fullmatch(
        r".*requirements.*\.(txt|in)|pyproject\.toml|setup\.cfg|environment.*\.ya?ml", lower
    ):
        return "dependencies"
    if lower.endswith((".yaml", ".yml", ".json")):
        return "config"
    return "native" if lower.endswith((".cu", ".cuh", ".cpp", ".cc", ".cxx")) else None


def line_traces(
    source: str, name: str, trace: re.Pattern[str], comment: str, text: re.Pattern[str] | None
) -> list[Trace]:
    """One trace per line that holds one outside a whole-line comment and outside text."""
    found = []
    for number, line in enumerate(source.splitlines(), start=1):
        code = text.sub("", line) if text else line
        use = not line.lstrip().startswith(comment) and not NOT_A_USE.match(line)
        hit = trace.search(code) if use else None
        if hit:
            found.append(Trace(name, number, hit[0].strip("\"' ,}")))
    return found


def notebook_traces(source: str, name: str) -> list[Trace]:
    """The traces in a notebook's code cells, as `NAME#cellN` (every cell counted from 1): Python
    lines as in a file, shell lines by SHELL_TRACE, other magics and languages not at all."""
    try:
        cells = json.loads(source)["cells"]
    except (ValueError, KeyError, TypeError):
        return []
    found: list[Trace] = []
    for number, cell in enumerate(cells, start=1):
        if cell.get("cell_type") != "code":
            continue
        lines = "".join(cell.get("source") or []).splitlines()
        magic = lines[0].strip()[2:].split() if lines and lines[0].strip().startswith("%%") else None
        shell_cell = bool(magic) and magic[0] in ("bash", "sh", "script", "system")
        if magic and not shell_cell and magic[0] not in ("time", "timeit", "capture", "prun", "debug"):
            continue
        python = []
        for number_in_cell, line in enumerate(lines, start=1):
            text = line.strip()
            shell = text.startswith("!") or (shell_cell and number_in_cell > 1)
            if shell and SHELL_TRACE.search(text):
                found.append(Trace(f"{name}#cell{number}", number_in_cell, SHELL_TRACE.search(text)[0]))
            python.append("" if shell or text.startswith("%") else line)
        found += traces_in("\n".join(python) + "\n", f"{name}#cell{number}")
    return found


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "npu_migrate", *map(str, args)], capture_output=True, text=True, check=False
    )


def reported_lines(scan_json: str, root: Path) -> set[tuple[str, int]]:
    """(file, line) for every line a finding covers."""
    lines: set[tuple[str, int]] = set()
    for finding in json.loads(scan_json)["findings"]:
        file = Path(finding["file"]).resolve().relative_to(root.resolve()).as_posix()
        file += f"#cell{finding['cell']}" if finding.get("cell") else ""
        for line in range(finding["line"], (finding.get("end_line") or finding["line"]) + 1):
            lines.add((file, line))
    return lines


@dataclass
class Audit:
    tree: Path
    before: int
    after: list[Trace]
    silent: list[Trace]
    migrated: Path
    held_by_reason: dict[str, int]  # the fixes apply held back, by reason (the scan of the migrated copy)


def audit(tree: Path, work: Path, unsafe: bool, jobs: int) -> Audit:
    migrated = work / tree.name
    flags = ["--unsafe"] if unsafe else []
    applied = cli("apply", tree, "--out", migrated, "--no-cache", "-j", str(jobs),
                  "--change-list", work / f"{tree.name}-changes.csv", *flags)  # fmt: skip
    if applied.returncode not in (0, 1):
        raise SystemExit(f"apply failed on {tree}: {applied.stderr.strip()[-2000:]}")
    scanned = cli("scan", migrated, "--format", "json", "--no-cache", "-j", str(jobs))
    if scanned.returncode not in (0, 1):
        raise SystemExit(f"scan failed on {migrated}: {scanned.stderr.strip()[-2000:]}")
    reported = reported_lines(scanned.stdout, migrated)
    after = tree_traces(migrated)
    silent = [t for t in after if (t.file, t.line) not in reported]
    held = json.loads(scanned.stdout)["summary"]["held_by_reason"]
    return Audit(tree, len(tree_traces(tree)), after, silent, migrated, held)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("trees", nargs="+", type=Path)
    parser.add_argument("--unsafe", action="store_true", help="apply with --unsafe")
    parser.add_argument("--show", type=int, default=20, help="silent traces to print per tree")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    any_silent = False
    with tempfile.TemporaryDirectory(prefix="npu-migrate-audit-") as work:
        print(f"{'tree':<28} {'traces before':>13} {'after':>6} {'reported':>9} {'silent':>7}")
        folders = [Path(work) / str(i) for i in range(len(args.trees))]  # trees may share a name (src)
        for folder in folders:
            folder.mkdir()
        audits = [
            audit(tree, folder, args.unsafe, args.jobs)
            for tree, folder in zip(args.trees, folders, strict=True)
        ]
        for a in audits:
            reported = len(a.after) - len(a.silent)
            print(f"{a.tree.name:<28} {a.before:>13} {len(a.after):>6} {reported:>9} {len(a.silent):>7}")
        for a in audits:
            reasons = ", ".join(f"{reason} {n}" for reason, n in a.held_by_reason.items()) or "none"
            print(f"{a.tree.name}: held by reason: {reasons}")
        for a in audits:
            if not a.silent:
                continue
            any_silent = True
            kinds = ", ".join(f"{kind} {n}" for kind, n in Counter(t.kind for t in a.silent).most_common())
            print(f"\n{a.tree.name}: silent by kind: {kinds}")
            for t in a.silent[: args.show]:
                if "#cell" in t.file:  # a notebook's cell: its line is in the JSON, not a line of the file
                    print(f"  {t.file}:{t.line}: {t.kind}")
                    continue
                line = (a.migrated / t.file).read_text(errors="replace").splitlines()[t.line - 1].strip()
                print(f"  {t.file}:{t.line}: {line[:110]}")
    return 1 if any_silent else 0


if __name__ == "__main__":
    raise SystemExit(main())
