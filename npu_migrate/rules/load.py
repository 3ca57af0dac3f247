"""Loading rule files: YAML in, validated rules out, with one-line errors that name the file,
the rule and the field."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from npu_migrate.rules.files import RuleError, builtin_rules_dir, rule_files
from npu_migrate.rules.precedence import undeclared_overlaps
from npu_migrate.rules.schema import MATCH_KEYS, Rule, RuleFile

# libyaml's safe loader where the wheel has it (ten times faster), else PyYAML's own.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _one_line_error(path: Path, data: Any, error: ValidationError) -> str:
    first = error.errors()[0]
    loc = list(first["loc"])
    where = ""
    if len(loc) >= 2 and loc[0] == "rules" and isinstance(loc[1], int):
        rules = data.get("rules") if isinstance(data, dict) else None
        rule = rules[loc[1]] if isinstance(rules, list) and loc[1] < len(rules) else None
        code = rule.get("code") if isinstance(rule, dict) else None
        where = f"rule {code or '#' + str(loc[1] + 1)}: "
        loc = loc[2:]
    if len(loc) >= 2 and loc[0] == "match" and loc[1] in MATCH_KEYS:
        loc = [loc[0], *loc[2:]]  # drop the union's tag: it repeats the field name
    field = ".".join(str(p) for p in loc) or "(rule)"
    message = first["msg"].removeprefix("Value error, ")
    return f"{path}: {where}field {field}: {message}"


def load_rule_file(path: Path, builtin: bool = False) -> RuleFile:
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_SAFE_LOADER)
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError(f"{path}: cannot read: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise RuleError(f"{path}{line}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    try:
        parsed = RuleFile.model_validate(data)
    except ValidationError as exc:
        raise RuleError(_one_line_error(path, data, exc)) from None
    loaded = {"category": parsed.category, "source": str(path), "builtin": builtin}
    rules = [r.model_copy(update=loaded) for r in parsed.rules]
    return parsed.model_copy(update={"rules": rules})


def load_rules(
    extra: Iterable[Path] = (), builtin: bool = True, overlaps_checked: bool = False
) -> list[Rule]:
    """The built-in catalog plus user rule files, ordered by code. Codes are unique across all;
    what a rule supersedes must exist; rules of one layer that can match the same node must
    declare their order (see rules.precedence): `overlaps_checked` where this very rule set
    passed that check before (the slowest of them, a pair of rules at a time). The catalog's
    own pairs are checked by its tests, not at every start."""
    layers = ([(builtin_rules_dir(), True)] if builtin else []) + [(p, False) for p in extra]
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    for top, is_builtin in layers:
        for path in rule_files([top]):
            for rule in load_rule_file(path, builtin=is_builtin).rules:
                if rule.code in seen:
                    raise RuleError(
                        f"{path}: rule {rule.code}: field code: already defined in {seen[rule.code]}"
                    )
                seen[rule.code] = str(path)
                rules.append(rule)
    for rule in rules:
        for field in ("supersedes", "only_with"):
            unknown = [code for code in getattr(rule, field) if code not in seen]
            if unknown:
                raise RuleError(
                    f"{rule.source}: rule {rule.code}: field {field}: no rule {', '.join(unknown)}"
                )
    user = [rule for rule in rules if not rule.builtin]  # the catalog's: tests/test_precedence.py
    for a, b in [] if overlaps_checked else undeclared_overlaps(user):
        raise RuleError(
            f"{b.source}: rule {b.code} can match the same code as {a.code} ({a.source}): "
            f"declare which wins with `supersedes: [{a.code}]` on one of them"
        )
    return sorted(rules, key=lambda r: r.code)
