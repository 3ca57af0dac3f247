"""Finding the files to look at: Python files under the given paths, honouring .gitignore,
each read once (or skipped with a reason)."""

from __future__ import annotations

import os
from pathlib import Path

import pathspec

from npu_migrate.model import SourceFile

SKIP_DIRS = {
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    "__pycache__",
    "node_modules",
    ".tox",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
}
DEFAULT_MAX_BYTES = 4 * 1024 * 1024


def _gitignore(root: Path) -> pathspec.PathSpec | None:
    ignore = root / ".gitignore"
    if not ignore.is_file():
        return None
    return pathspec.GitIgnoreSpec.from_lines(
        ignore.read_text(encoding="utf-8", errors="replace").splitlines()
    )


def _load(path: Path, display: str, root: Path | None, max_bytes: int) -> SourceFile:
    if path.is_symlink() and root is not None:
        target = path.resolve()
        if not target.is_relative_to(root.resolve()):
            return SourceFile(path, display, skipped="symlink leads outside the tree")
    try:
        size = path.stat().st_size
        if size > max_bytes:
            return SourceFile(path, display, skipped=f"larger than {max_bytes // 1024} KiB")
        data = path.read_bytes()
    except OSError as exc:
        return SourceFile(path, display, skipped=f"cannot read: {exc.strerror}")
    if b"\0" in data[:8192]:
        return SourceFile(path, display, skipped="binary file")
    return SourceFile(path, display, data=data)


def _is_python(path: Path) -> bool:
    """A .py file, or a script whose shebang names Python."""
    if path.suffix in (".py", ".pyi"):
        return True
    try:
        with path.open("rb") as handle:
            first = handle.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def discover(paths: list[Path], max_bytes: int = DEFAULT_MAX_BYTES) -> list[SourceFile]:
    """Python files under each path, each once, honouring the root .gitignore and never
    following directory symlinks. A file named directly is taken if it is Python (by suffix
    or shebang)."""
    found: list[SourceFile] = []
    seen: set[Path] = set()

    def add(path: Path, display: str, root: Path | None) -> None:
        key = path.resolve()
        if key not in seen:
            seen.add(key)
            found.append(_load(path, display, root, max_bytes))

    for top in paths:
        if top.is_file():
            if _is_python(top):
                add(top, str(top), None)
            else:
                found.append(SourceFile(top, str(top), skipped="not a Python file"))
            continue
        ignore = _gitignore(top)
        for folder, dirs, names in os.walk(top):
            here = Path(folder)
            rel_here = here.relative_to(top)
            dirs[:] = sorted(
                d
                for d in dirs
                if d not in SKIP_DIRS and not (ignore and ignore.match_file(f"{(rel_here / d).as_posix()}/"))
            )
            for name in sorted(names):
                rel = (rel_here / name).as_posix()
                if name.endswith(".py") and not (ignore and ignore.match_file(rel)):
                    add(here / name, str(top / rel), top)
    return found
