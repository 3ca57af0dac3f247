"""The file system side: finding the files to look at, and writing results without ever
leaving a half-written file behind."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pathspec

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


@dataclass(frozen=True)
class SourceFile:
    path: Path  # where to read it
    display: str  # how to name it in reports: relative to the root it was found under
    data: bytes | None = None  # None: skipped
    skipped: str | None = None  # why it was skipped


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


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` in one step, keeping its permission bits."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".npu-migrate")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        if path.exists():
            shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def copy_tree(source: Path, destination: Path) -> Path:
    """Copy `source` into a temporary sibling of `destination`; the caller renames it into
    place when done, so an interrupted run never leaves a half-migrated tree at `destination`."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(
        tempfile.mkdtemp(dir=destination.parent, prefix=f".{destination.name}.", suffix=".partial")
    )
    shutil.copytree(source, staging, symlinks=True, dirs_exist_ok=True)
    return staging
