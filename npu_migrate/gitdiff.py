"""`--diff-from REV`: the lines a change added or modified since it forked from a git revision
(the working tree, staged or not, against the merge base of REV and HEAD), and untracked files
whole, so a pull request's gate sees only what the pull request adds, not what its base branch
changed since. `A...B` is the change B makes since it forked from A (B's working tree where B is
what is checked out). A notebook's lines are its cells' lines: the cells' code is compared, not
the JSON that holds it."""

from __future__ import annotations

import codecs
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path

from npu_migrate.git import GitError, git, repository_top

_FILE = re.compile(r"^\+\+\+ (?:b/(.*)|\"b/(.*)\")$")
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")
# The prefixes are given, so that a user's or the repository's diff.noprefix or
# diff.mnemonicPrefix cannot change how the file headers read.
_OPTIONS = ("--unified=0", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames")
_PREFIXES = ("--src-prefix=a/", "--dst-prefix=b/")


@dataclass
class Changed:
    """What a change touched: resolved path -> its changed lines (None: the whole file is new),
    and for a notebook the changed (cell, line) pairs, cells counted from 1 as findings count them."""

    lines: dict[Path, set[int] | None] = field(default_factory=dict)
    cells: dict[Path, set[tuple[int, int]]] = field(default_factory=dict)


def changed_lines(where: Path, rev: str) -> Changed:
    """What changed since `rev` in the repository that holds `where`."""
    folder = where if where.is_dir() else where.parent
    top = repository_top(folder)
    since, dots, end = rev.partition("...")
    head = _commit(top, "HEAD", rev)
    tip = _commit(top, end, rev) if dots and end else head
    base = git(top, "merge-base", _commit(top, since or "HEAD", rev), tip).strip()
    working_tree = tip == head  # the change is what is checked out, edits and untracked files too
    changed = Changed()
    current: Path | None = None
    in_header = False  # between `diff --git` and the first hunk: an added line may read `+++ b/x`
    diff = git(top, "diff", *_OPTIONS, *_PREFIXES, base, *([] if working_tree else [tip]), "--")
    for line in diff.split("\n"):
        if line.startswith("diff --git "):
            in_header, current = True, None
        elif in_header and (name := _FILE.match(line)) is not None:
            current = (top / _path(name)).resolve()
            changed.lines.setdefault(current, set())
            if current.suffix == ".ipynb":
                old = _shown(top, base, _path(name))
                new = current.read_bytes() if working_tree else _shown(top, tip, _path(name))
                changed.cells[current] = _changed_cells(old, new)
        elif (hunk := _HUNK.match(line)) is not None and current is not None:
            in_header = False
            start, count = int(hunk[1]), int(hunk[2] if hunk[2] is not None else 1)
            lines = changed.lines[current]
            if lines is not None:
                lines.update(range(start, start + count))
    untracked = git(top, "ls-files", "--others", "--exclude-standard", "-z") if working_tree else ""
    for new_file in untracked.split("\0"):
        if new_file:
            changed.lines[(top / new_file).resolve()] = None
    return changed


def _path(header: re.Match[str]) -> str:
    """The path a `+++` header names: git quotes one with unusual characters as a C string (its
    bytes in octal escapes), and ends one holding a space with a tab."""
    if header[2] is not None:
        return codecs.escape_decode(header[2].encode("latin-1"))[0].decode("utf-8", "surrogateescape")
    return header[1].removesuffix("\t")


def _shown(top: Path, commit: str, path: str) -> bytes:
    """The file at `path` as `commit` holds it (nothing where it did not exist)."""
    try:
        return git(top, "show", f"{commit}:{path}").encode("utf-8", "surrogateescape")
    except GitError:
        return b""


def _changed_cells(old: bytes, new: bytes) -> set[tuple[int, int]]:
    """The (cell, line) pairs of the new notebook's code whose lines the old one does not hold
    there; every line of a notebook that cannot be read (the whole file is then the change)."""
    from npu_migrate.handlers.notebook import NotANotebook, cell_lines  # (the engine: not at start-up)

    try:
        before = [text for _, _, text in cell_lines(old)] if old else []
    except NotANotebook:
        before = []
    try:
        after = cell_lines(new)
    except NotANotebook:
        return {(0, 0)}
    matcher = difflib.SequenceMatcher(None, before, [text for _, _, text in after], autojunk=False)
    kept = {j + k for _, j, size in matcher.get_matching_blocks() for k in range(size)}
    return {(cell, line) for index, (cell, line, _) in enumerate(after) if index not in kept}


def _commit(top: Path, name: str, given: str) -> str:
    """The commit `name` stands for, or an error naming what was given."""
    try:
        return git(top, "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}").strip()
    except GitError:
        raise GitError(f"--diff-from {given}: {name} is no commit in {top}") from None


def touches(changed: Changed, path: Path, first: int, last: int, cell: int | None = None) -> bool:
    resolved = path.resolve()
    lines = changed.lines.get(resolved, set())
    if lines is None:
        return True
    if cell is not None and resolved in changed.cells:
        cells = changed.cells[resolved]
        return (0, 0) in cells or any((cell, n) in cells for n in range(first, last + 1))
    return any(first <= n <= last for n in lines)
