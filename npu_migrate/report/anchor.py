"""Where a report's paths start: the repository's root, whichever folder the scan ran from and
however its paths were named (`.`, `..`, absolute), so that an annotation lands on the file a
pull request shows and a baseline recorded one way matches a scan run another."""

from __future__ import annotations

import os
from pathlib import Path

from npu_migrate.git import top_level


def repository_root(start: Path, config_folder: Path | None) -> Path:
    """git's top level around `start`; outside a repository, the folder of the configuration in
    use, else the working folder."""
    top = top_level(start.absolute() if start.is_dir() else start.absolute().parent)
    return top or (config_folder or Path.cwd()).absolute()


def anchored(path: Path | str, root: Path) -> str:
    """`path` relative to `root`, with forward slashes; a file outside the root keeps its
    absolute path. A link inside the root is named where it is, not where it points."""
    absolute = Path(os.path.abspath(path))
    candidates = (absolute, absolute.parent.resolve() / absolute.name)
    for base in dict.fromkeys((root.absolute(), root.resolve())):
        for candidate in candidates:
            if candidate.is_relative_to(base):
                return candidate.relative_to(base).as_posix()
    return absolute.as_posix()
