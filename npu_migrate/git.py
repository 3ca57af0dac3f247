"""Asking git about a repository without running anything the repository configures: a scanned
tree is untrusted, and its `.git/config` may name an fsmonitor hook, textconv or external diff
programs and clean filters that git would otherwise run on our behalf."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

# Options before the subcommand: no fsmonitor hook, no hooks, no pager, no untracked cache.
_SAFE = (
    "-c", "core.fsmonitor=false",
    "-c", "core.hooksPath=/dev/null",
    "-c", "core.untrackedCache=false",
    "--no-pager",
)  # fmt: skip


class GitError(Exception):
    """git could not answer; the message says why, in a line."""


def _run(cwd: Path, args: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"}
    try:
        return subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            errors="surrogateescape",
            env=env,
            check=False,
        )
    except FileNotFoundError:
        raise GitError("git is not on PATH") from None


def git(cwd: Path, *args: str) -> str:
    """git's output for `args`, run so that nothing the repository configures runs: each clean
    filter the repository's config names is blanked as well (git would run it to diff a file)."""
    filters = _run(cwd, (*_SAFE, "config", "--name-only", "--get-regexp", r"^filter\..*\.(clean|process)$"))
    blanked = [part for name in filters.stdout.split() for part in ("-c", f"{name}=")]
    done = _run(cwd, (*_SAFE, *blanked, *args))
    if done.returncode != 0:
        raise GitError(f"git {args[0]}: {(done.stderr.strip().splitlines() or ['failed'])[-1]}")
    return done.stdout


def repository_top(folder: Path) -> Path:
    """The top folder of the repository (or work tree) `folder` lies in; GitError outside one."""
    return Path(git(folder, "rev-parse", "--show-toplevel").strip())


def top_level(folder: Path) -> Path | None:
    """`repository_top`, or None outside a repository or where git is missing. A folder that
    does not exist yet (apply's --out): its nearest parent's."""
    existing = next((above for above in (folder, *folder.parents) if above.is_dir()), None)
    if existing is None:
        return None
    try:
        return repository_top(existing)
    except GitError:
        return None


def tracked(folder: Path) -> tuple[Path, frozenset[str]] | None:
    """The repository's top folder and the files git tracks under `folder` (paths relative to
    the top, as git writes them); None where `folder` is in no repository or git is missing."""
    try:
        top = repository_top(folder)
        listed = git(folder, "ls-files", "-z", "--cached", "--full-name", "--", ".")
    except GitError:
        return None
    return top, frozenset(name for name in listed.split("\0") if name)
