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


def opt_in_sets() -> dict[str, Path]:
    """The catalog's rule sets that run only when asked for by name (`--rules NAME`): rewrites
    a user chooses knowing their trade-off, such as torch_npu's own fused optimizers."""
    return {p.stem: p for p in sorted((builtin_rules_dir() / "opt-in").glob("*.yaml"))}


def rule_files(paths: Iterable[Path]) -> list[Path]:
    """The rule files named, the *.yaml files in the folders named, and the opt-in sets named."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.glob("*.yaml") if p.is_file()))
        elif path.is_file():
            found.append(path)
        elif (chosen := opt_in_sets().get(str(path))) is not None:
            found.append(chosen)
        else:
            names = ", ".join(opt_in_sets()) or "none"
            raise RuleError(f"{path}: no such rule file or folder, nor an opt-in rule set ({names})")
    return found


def rule_codes(paths: Iterable[Path]) -> set[str]:
    """The codes the rule files named define, read without loading the rules (a tenth of a
    second where loading them takes more than half): what a selector may name. A file that does
    not parse defines none here; loading it reports why."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    codes: set[str] = set()
    for path in rule_files(paths):
        try:
            data = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        entries = data.get("rules") if isinstance(data, dict) else None
        codes |= {str(e["code"]) for e in entries or [] if isinstance(e, dict) and "code" in e}
    return codes
