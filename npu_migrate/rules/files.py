"""Where rule files are, without reading them: cheap enough for a run that finds every result
in its cache and never loads a rule."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


class RuleError(Exception):
    """A rule file that cannot be used; the message is one line naming file, rule and field."""


def builtin_rules_dir() -> Path:
    """The catalog inside the installed wheel, or rules/ beside the package in a checkout."""
    package = Path(__file__).parent.parent
    packaged = package / "_rules"
    return packaged if packaged.is_dir() else package.parent / "rules"


def rule_files(paths: Iterable[Path]) -> list[Path]:
    """The rule files named, and the *.yaml files in the folders named."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.glob("*.yaml") if p.is_file()))
        elif path.is_file():
            found.append(path)
        else:
            raise RuleError(f"{path}: no such rule file or folder")
    return found
