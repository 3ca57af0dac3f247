"""Rules indexed for the one-pass matcher: name tables by qualified name, methods and
attributes by name, string contexts by kind, patterns by root node type, and the text
prefilter that lets files without any trigger skip parsing altogether."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

import libcst as cst

from npu_migrate.patterns import Pattern
from npu_migrate.ruleset import (
    AttributeMatch,
    CallMatch,
    ImportMatch,
    MethodMatch,
    NameMatch,
    PatternMatch,
    Rule,
    StringContext,
    StringMatch,
)


@dataclass(frozen=True)
class NameHit:
    rule: Rule
    specificity: int  # higher wins: exact names beat prefixes, longer beats shorter


@dataclass
class NameTable:
    """Qualified-name patterns: 'a.b.c' exactly, or 'a.b.*' for anything strictly under a.b."""

    exact: dict[str, list[Rule]] = field(default_factory=lambda: defaultdict(list))
    under: dict[str, list[Rule]] = field(default_factory=lambda: defaultdict(list))

    def add(self, pattern: str, rule: Rule) -> None:
        if pattern.endswith(".*"):
            self.under[pattern[:-2]].append(rule)
        else:
            self.exact[pattern].append(rule)

    def rules_for(self, qualified: str) -> list[Rule]:
        """Every rule for exactly `qualified` or for a prefix it lies under, most specific first."""
        parts = qualified.split(".")
        found = list(self.exact.get(qualified, []))
        for size in range(len(parts) - 1, 0, -1):
            found.extend(self.under.get(".".join(parts[:size]), []))
        return found

    def lookup(self, qualified: str, whole: bool = False) -> NameHit | None:
        """The most specific rule for `qualified` or, unless `whole`, for one of its prefixes."""
        parts = qualified.split(".")
        for size in range(len(parts), 0, -1):
            prefix = ".".join(parts[:size])
            if prefix in self.exact and (size == len(parts) or not whole):
                return NameHit(self.exact[prefix][0], 2 * size + 1)
            if size < len(parts) and prefix in self.under:
                return NameHit(self.under[prefix][0], 2 * size)
        return None


@dataclass(frozen=True)
class StringRule:
    rule: Rule
    regex: re.Pattern[str]
    where: tuple[StringContext, ...]


WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ATTRIBUTE = re.compile(r"\.[ \t]*([A-Za-z_][A-Za-z0-9_]*)")
IMPORTED = re.compile(
    r"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+)?import[ \t]+(\([^)]*\)|(?:[^\n]*\\\n)*[^\n]*)", re.MULTILINE
)


def _accessed(name: str) -> str:
    """The token for `name` reached as an attribute or imported by name (`.load`), which
    is much rarer in a file than the bare word (`load`)."""
    return "." + name


def _components(pattern: str) -> frozenset[str]:
    """What a file must contain for a qualified-name pattern to resolve in it: every
    component appears in the import that binds the name or in its use, and the last one is
    reached as an attribute or named in an import."""
    parts = [p for p in pattern.split(".") if p != "*"]
    if len(parts) == 1 or pattern.endswith(".*"):
        return frozenset(parts)
    return frozenset([*parts[:-1], _accessed(parts[-1])])


def _condition_words(match: CallMatch) -> list[frozenset[str]]:
    """For each way the call's name conditions can hold, the words it needs."""
    needs = [frozenset[str]()]
    for condition in match.args.values():
        if condition.name:
            needs = [n | _components(name) for n in needs for name in condition.name]
    return needs


def tokens(text: str) -> set[str]:
    """The words of a file, plus `.name` for names used as attributes or imported by name."""
    found = set(WORD.findall(text))
    found.update(_accessed(w) for w in ATTRIBUTE.findall(text))
    for names in IMPORTED.findall(text):
        found.update(_accessed(w) for w in WORD.findall(names))
    return found


class Prefilter:
    """Cheap text test before parsing: each rule needs all tokens of one of its alternatives
    (or, for string rules, its regex somewhere in the text); a file that satisfies no rule
    cannot produce a finding and is not parsed."""

    def __init__(self) -> None:
        self.alternatives: set[frozenset[str]] = set()
        self._regexes: list[str] = []
        self._regex: re.Pattern[str] | None = None

    def need(self, *alternatives: frozenset[str]) -> None:
        self.alternatives.update(alternatives)

    def need_regex(self, regex: str) -> None:
        """A string rule: its regex must match a literal's whole text, so in the source it
        starts right after an opening quote (prose in comments does not count)."""
        self._regexes.append(regex)
        self._regex = re.compile("(?<=[\"'])(?:" + "|".join(f"(?:{r})" for r in self._regexes) + ")")

    def may_match(self, text: str) -> bool:
        if self._regex is not None and self._regex.search(text):
            return True
        found = tokens(text)
        return any(needs <= found for needs in self.alternatives)


class RuleIndex:
    """All rules, arranged so each node type looks only at the rules that can match it."""

    def __init__(self, rules: list[Rule]) -> None:
        self.rules = rules
        self.names = NameTable()
        self.calls = NameTable()
        self.imports = NameTable()
        self.methods: dict[str, list[Rule]] = defaultdict(list)
        self.attributes: dict[str, list[Rule]] = defaultdict(list)
        self.strings: list[StringRule] = []
        self.patterns: dict[type[cst.CSTNode], list[tuple[Rule, Pattern]]] = defaultdict(list)
        self.prefilter = Prefilter()
        for rule in rules:
            self._add(rule)

    def _add(self, rule: Rule) -> None:
        match, need = rule.match, self.prefilter.need
        if isinstance(match, NameMatch):
            for name in match.name:
                self.names.add(name, rule)
                need(_components(name))
        elif isinstance(match, CallMatch):
            for name in match.call:
                self.calls.add(name, rule)
                need(*(_components(name) | extra for extra in _condition_words(match)))
        elif isinstance(match, ImportMatch):
            for name in match.import_:
                self.imports.add(name, rule)
                need(_components(name))
        elif isinstance(match, MethodMatch):
            for name in match.method:
                self.methods[name].append(rule)
                need(frozenset([_accessed(name)]))
        elif isinstance(match, AttributeMatch):
            for name in match.attribute:
                self.attributes[name].append(rule)
                need(frozenset([_accessed(name)]))
        elif isinstance(match, StringMatch):
            self.strings.append(StringRule(rule, re.compile(match.string), tuple(match.where)))
            self.prefilter.need_regex(match.string)
        elif isinstance(match, PatternMatch):
            pattern = Pattern.compile(match.pattern)
            self.patterns[pattern.root_type].append((rule, pattern))
            need(frozenset(pattern.words))

    def may_match(self, text: str) -> bool:
        """False when no rule can possibly match: the file need not be parsed."""
        return self.prefilter.may_match(text)
