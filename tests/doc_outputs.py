"""The output README.md and docs/*.md show, from real runs.

A fenced block right after a `<!-- output: NAME -->` comment is what SCENES[NAME]'s commands
print, run for real on the bundled fixtures in a temporary copy of this checkout (a git
repository named npu-migrate, as a clone is), with the temporary path and the emulation's times
left out. `python -m tests.doc_outputs` rewrites every such block; `--check` lists the stale ones
and exits 1 (tests/test_doc_outputs.py runs it). A block that shows a command run on something
the tests cannot fetch or afford (a real project's sources, a benchmark's measurements) says so
with `<!-- not regenerated: WHY -->` instead.

The recipes pin a commit of this repository (there are no release tags): `--pin REV` writes REV,
resolved to its full hash, wherever a recipe pins one (the `rev:` of the pre-commit recipe and
the `@REV` of the pip lines)."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.fixture_cases import ROOT, outside_ci

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARK = re.compile(r"<!-- output: (?P<name>[\w-]+) -->\n(?P<fence>```\w*)\n(?P<body>.*?)^```$", re.M | re.S)
NOT_REGENERATED = re.compile(r"<!-- not regenerated: [^>]+ -->\n```")
SHOWN_COMMAND = re.compile(r"^\$ npu-migrate ", re.M)
PIN = re.compile(r"(rev: |npu-migrate@)([0-9a-f]{40})\b")
# the one-line demo after its set-up (a fresh virtual environment with this checkout installed)
DEMO_SETUP = "python3 -m venv .venv && .venv/bin/pip install -q . && "
DEMO = (
    "{ .venv/bin/npu-migrate apply fixtures/gpt_ddp/src --diff; "
    ".venv/bin/npu-migrate apply fixtures/gpt_ddp/src --out gpt_ddp_npu; }"
)
FRAMEWORK_CODES = (
    *("NPU846", "NPU962", "NPU847", "NPU967", "NPU848", "NPU970", "NPU849", "NPU204", "NPU851"),
    *("NPU103", "NPU120", "NPU101", "NPU806", "NPU929"),
)
ADDED_CUDA_CALL = "\n\ndef to_device(batch):\n    return batch.cuda(non_blocking=True)\n"

Keep = Callable[[list[str]], list[bool]]


@dataclass(frozen=True)
class Step:
    """One command as the page shows it, the folder it runs in, and which lines of its output
    the page keeps (every line unless `keep` says; a gap shows as `...`)."""

    command: str
    cwd: str = "."
    keep: Keep | None = None


@dataclass(frozen=True)
class Scene:
    """Commands shown together in one block; `prompt` shows each as `$ command` before its output."""

    steps: tuple[Step, ...]
    setup: Callable[[Path], None] | None = None
    prompt: bool = True
    note: dict[int, str] = field(default_factory=dict)  # step index: a comment after its `$` line


def head(n: int) -> Keep:
    """The first n lines."""
    return lambda lines: [i < n for i in range(len(lines))]


def head_and_from(n: int, start: str) -> Keep:
    """The first n lines and every line from the first that starts with `start`."""

    def keep(lines: list[str]) -> list[bool]:
        first = next((i for i, line in enumerate(lines) if line.startswith(start)), len(lines))
        return [i < n or i >= first for i in range(len(lines))]

    return keep


def until(stop: str) -> Keep:
    """Every line before the first that starts with `stop`."""

    def keep(lines: list[str]) -> list[bool]:
        last = next((i for i, line in enumerate(lines) if line.startswith(stop)), len(lines))
        return [i < last for i in range(len(lines))]

    return keep


def first_per_file(tail: int) -> Keep:
    """A finding's line for each file that has one, and the last `tail` lines (the summary)."""

    def keep(lines: list[str]) -> list[bool]:
        seen: set[str] = set()
        kept = []
        for i, line in enumerate(lines):
            file = line.split(":", 1)[0] if ": NPU" in line else None
            kept.append(i >= len(lines) - tail or (file is not None and file not in seen))
            if file is not None:
                seen.add(file)
        return kept

    return keep


def first_of_codes(codes: tuple[str, ...]) -> Keep:
    """The first finding of each rule in `codes`."""

    def keep(lines: list[str]) -> list[bool]:
        seen: set[str] = set()
        kept = []
        for line in lines:
            code = next((c for c in codes if f": {c} [" in line), None)
            kept.append(code is not None and code not in seen)
            seen.add(code or "")
        return kept

    return keep


def cnn_pull_request(checkout: Path) -> None:
    """The bundled CNN project in a git repository of its own, with one CUDA call added since."""
    repo = checkout / "cnn"
    shutil.copytree(checkout / "fixtures" / "cnn_dp" / "src", repo)
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    with (repo / "utils.py").open("a") as f:
        f.write(ADDED_CUDA_CALL)


def forget_change_list(checkout: Path) -> None:
    """No change list from an earlier scene: the walkthrough's apply starts the record."""
    for written in checkout.parent.glob("npu-migrate-npu-migrate-changes.*"):
        written.unlink()


SCENES: dict[str, Scene] = {
    "demo": Scene((Step(DEMO, keep=head_and_from(8, "would rewrite")),), prompt=False),
    "walk-scan": Scene((Step("npu-migrate scan fixtures/llama_tiny/src"),)),
    "walk-diff": Scene(
        (Step("npu-migrate apply fixtures/llama_tiny/src --unsafe --diff", keep=head_and_from(14, "@@ -11")),)
    ),
    "walk-apply": Scene(
        (Step("npu-migrate apply fixtures/llama_tiny/src --unsafe --out llama_npu"),),
        setup=forget_change_list,
    ),
    "walk-run": Scene(
        (Step("npu-migrate run --emulate --forecast train.py --steps 5", cwd="llama_npu"),),
        note={0: "      # in llama_npu"},
    ),
    "walk-verify": Scene(
        (
            Step(
                "npu-migrate verify --original fixtures/llama_tiny/src --migrated llama_npu"
                " --entry entry.py:build --steps 3",
                keep=until("worst module outputs"),
            ),
        )
    ),
    "scan-cnn": Scene(
        (Step("npu-migrate scan fixtures/cnn_dp/src", keep=head_and_from(10, "CUDA touchpoints")),)
    ),
    "scan-notebook": Scene((Step("npu-migrate scan fixtures/notebooks/src/train.ipynb"),)),
    "scan-launch": Scene((Step("npu-migrate scan fixtures/launch/src"),)),
    "scan-repository": Scene((Step("npu-migrate scan fixtures/training_repo/src", keep=first_per_file(5)),)),
    "apply-cnn": Scene((Step("npu-migrate apply fixtures/cnn_dp/src --diff", keep=head(42)),)),
    "ci-pull-request": Scene(
        (
            Step("npu-migrate scan . --diff-from HEAD --format github", cwd="cnn"),
            Step("npu-migrate scan . --baseline npu-baseline.json --update-baseline", cwd="cnn"),
        ),
        setup=cnn_pull_request,
    ),
    "verify-wrong-scale": Scene(
        (
            Step(
                "npu-migrate verify --original fixtures/verify/gpt/original"
                " --migrated fixtures/verify/gpt/migrated_wrong_scale --entry entry.py:build",
                keep=until("memory and time"),
            ),
        )
    ),
    "scan-frameworks": Scene(
        (
            Step("npu-migrate scan fixtures/megatron/src", keep=first_of_codes(FRAMEWORK_CODES)),
            Step("npu-migrate scan fixtures/stacks/src", keep=first_of_codes(FRAMEWORK_CODES)),
        )
    ),
    "forecast-nanogpt": Scene(
        (Step("npu-migrate run --emulate --forecast nanogpt_train.py", cwd="fixtures/forecast"),),
        note={0: "      # in fixtures/forecast"},
    ),
}


def git(cwd: Path, *args: str) -> None:
    """git in `cwd`, with an author of its own: the scenes' repositories need no user config."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "docs", "GIT_AUTHOR_EMAIL": "docs@example.com"}
    env |= {"GIT_COMMITTER_NAME": "docs", "GIT_COMMITTER_EMAIL": "docs@example.com"}
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def make_checkout(root: Path) -> Path:
    """A copy of this checkout's fixtures in a git repository named npu-migrate, with a
    `.venv/bin/npu-migrate` and an `npu-migrate` on PATH that run this interpreter's npu_migrate."""
    checkout = root / "npu-migrate"
    shutil.copytree(ROOT / "fixtures", checkout / "fixtures")
    git(checkout, "init", "-q")
    git(checkout, "add", ".")
    git(checkout, "commit", "-qm", "checkout")
    for bin_dir in (checkout / ".venv" / "bin", root / "bin"):
        bin_dir.mkdir(parents=True)
        shim = bin_dir / "npu-migrate"
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m npu_migrate "$@"\n')
        shim.chmod(0o755)
    return checkout


def run_step(step: Step, checkout: Path) -> list[str]:
    """The step's output as the terminal shows it (stdout and stderr in the order written),
    the temporary folder's path left out and the page's abridgement applied."""
    env = {**outside_ci(), "COLUMNS": "100", "PYTHONUNBUFFERED": "1"}
    env["PATH"] = f"{checkout.parent / 'bin'}{os.pathsep}{env['PATH']}"
    ran = subprocess.run(
        ["bash", "-c", step.command],
        cwd=checkout / step.cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    text = ran.stdout.replace(str(checkout.parent), "/path/to")
    lines = [line.rstrip() for line in text.splitlines()]
    kept = step.keep(lines) if step.keep else [True] * len(lines)
    shown: list[str] = []
    for line, keep in zip(lines, kept, strict=True):
        if keep:
            shown.append(line)
        elif not shown or shown[-1] != "...":
            shown.append("...")
    return shown


def render(scenes: dict[str, Scene]) -> dict[str, str]:
    """Each scene's block body, from one run of every scene in one temporary checkout."""
    bodies = {}
    with tempfile.TemporaryDirectory() as tmp:
        checkout = make_checkout(Path(tmp))
        for name, scene in scenes.items():
            if scene.setup:
                scene.setup(checkout)
            lines: list[str] = []
            for index, step in enumerate(scene.steps):
                if scene.prompt:
                    lines.append(f"$ {step.command}{scene.note.get(index, '')}")
                lines += run_step(step, checkout)
            bodies[name] = "\n".join(lines) + "\n"
    return bodies


def refreshed(text: str, bodies: dict[str, str]) -> str:
    """The page with each marked block's body replaced by its scene's output."""

    def body(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in bodies:
            raise SystemExit(f"error: no scene named {name!r} (tests/doc_outputs.py SCENES)")
        return f"<!-- output: {name} -->\n{match['fence']}\n{bodies[name]}```"

    return MARK.sub(body, text)


def stale_pages(bodies: dict[str, str], pages: list[Path] = PAGES) -> list[str]:
    """The pages whose marked blocks differ from the scenes' output, by name."""
    return [page.name for page in pages if refreshed(page.read_text(), bodies) != page.read_text()]


def pinned(rev: str, pages: list[Path] = PAGES) -> None:
    """Every recipe's pin set to `rev`, a commit of this repository."""
    full = subprocess.run(
        ["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=ROOT, capture_output=True, text=True
    )
    if full.returncode:
        raise SystemExit(f"error: {rev} is no commit of this repository")
    for page in pages:
        text = page.read_text()
        page.write_text(PIN.sub(lambda m: m[1] + full.stdout.strip(), text))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="list the stale pages; exit 1 if any")
    parser.add_argument("--pin", metavar="REV", help="pin the recipes to this commit")
    args = parser.parse_args()
    if args.pin:
        pinned(args.pin)
    bodies = render(SCENES)
    if args.check:
        stale = stale_pages(bodies)
        for name in stale:
            print(f"stale: {name} (run: python -m tests.doc_outputs)")
        raise SystemExit(1 if stale else 0)
    for page in PAGES:
        page.write_text(refreshed(page.read_text(), bodies))


if __name__ == "__main__":
    main()
