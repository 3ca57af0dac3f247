"""`--diff-from REV`: the lines a change added or modified since it forked from a git revision
(the working tree, staged or not, against the merge base of REV and HEAD), and untracked files
whole, so a pull request's gate sees only what the pull request adds, not what its base branch
changed since. `A...B` is the change B makes since it forked from A (B's working tree where B is
what is checked out)."""

from __future__ import annotations

import re
from pathlib import Path

from npu_migrate.git import GitError, git, repository_top

_FILE = re.compile(r"^\+\+\+ b/(.*)$")
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")

Changed = dict[Path, set[int] | None]  # resolved path -> changed lines (None: the whole file)


def changed_lines(where: Path, rev: str) -> Changed:
    """What changed since `rev` in the repository that holds `where`."""
    folder = where if where.is_dir() else where.parent
    top = repository_top(folder)
    since, dots, end = rev.partition("...")
    head = _commit(top, "HEAD", rev)
    tip = _commit(top, end, rev) if dots and end else head
    base = git(top, "merge-base", _commit(top, since or "HEAD", rev), tip).strip()
    working_tree = tip == head  # the change is what is checked out, edits and untracked files too
    changed: Changed = {}
    current: Path | None = None
    options = ("--unified=0", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames")
    diff = git(top, "diff", *options, base, *([] if working_tree else [tip]), "--")
    for line in diff.splitlines():
        if (name := _FILE.match(line)) is not None:
            current = (top / name[1]).resolve()
            changed.setdefault(current, set())
        elif (hunk := _HUNK.match(line)) is not None and current is not None:
            start, count = int(hunk[1]), int(hunk[2] if hunk[2] is not None else 1)
            lines = changed[current]
            if lines is not None:
                lines.update(range(start, start + count))
    untracked = git(top, "ls-files", "--others", "--exclude-standard", "-z") if working_tree else ""
    for new_file in untracked.split("\0"):
        if new_file:
            changed[(top / new_file).resolve()] = None
    return changed


def _commit(top: Path, name: str, given: str) -> str:
    """The commit `name` stands for, or an error naming what was given."""
    try:
        return git(top, "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}").strip()
    except GitError:
        raise GitError(f"--diff-from {given}: {name} is no commit in {top}") from None


def touches(changed: Changed, path: Path, first: int, last: int) -> bool:
    lines = changed.get(path.resolve(), set())
    return lines is None or any(first <= n <= last for n in lines)
