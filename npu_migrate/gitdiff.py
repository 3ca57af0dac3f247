"""`--diff-from REV`: the lines a change added or modified since a git revision (the working tree,
staged or not, against REV), and untracked files whole, so a pull request's gate sees only what
the pull request adds."""

from __future__ import annotations

import re
from pathlib import Path

from npu_migrate.git import git

_FILE = re.compile(r"^\+\+\+ b/(.*)$")
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")

Changed = dict[Path, set[int] | None]  # resolved path -> changed lines (None: the whole file)


def changed_lines(where: Path, rev: str) -> Changed:
    """What changed since `rev` in the repository that holds `where`."""
    folder = where if where.is_dir() else where.parent
    top = Path(git(folder, "rev-parse", "--show-toplevel").strip())
    git(top, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    changed: Changed = {}
    current: Path | None = None
    diff = git(
        top, "diff", "--unified=0", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames", rev, "--"
    )
    for line in diff.splitlines():
        if (name := _FILE.match(line)) is not None:
            current = (top / name[1]).resolve()
            changed.setdefault(current, set())
        elif (hunk := _HUNK.match(line)) is not None and current is not None:
            start, count = int(hunk[1]), int(hunk[2] if hunk[2] is not None else 1)
            lines = changed[current]
            if lines is not None:
                lines.update(range(start, start + count))
    for untracked in git(top, "ls-files", "--others", "--exclude-standard", "-z").split("\0"):
        if untracked:
            changed[(top / untracked).resolve()] = None
    return changed


def touches(changed: Changed, path: Path, first: int, last: int) -> bool:
    lines = changed.get(path.resolve(), set())
    return lines is None or any(first <= n <= last for n in lines)
