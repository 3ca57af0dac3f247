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

    def words(self) -> set[str]:
        return {p.rsplit(".", 1)[-1] for p in [*self.exact, *self.under]}


@dataclass(frozen=True)
class StringRule:
    rule: Rule
    regex: re.Pattern[str]
    where: tuple[StringContext, ...]


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
        words: set[str] = set()
        regexes: list[str] = []
        for rule in rules:
            match = rule.match
            if isinstance(match, NameMatch):
                for name in match.name:
                    self.names.add(name, rule)
            elif isinstance(match, CallMatch):
                for name in match.call:
                    self.calls.add(name, rule)
            elif isinstance(match, ImportMatch):
                for name in match.import_:
                    self.imports.add(name, rule)
                    words.add(name.split(".")[0])
            elif isinstance(match, MethodMatch):
                for name in match.method:
                    self.methods[name].append(rule)
                words.update(match.method)
            elif isinstance(match, AttributeMatch):
                for name in match.attribute:
                    self.attributes[name].append(rule)
                words.update(match.attribute)
            elif isinstance(match, StringMatch):
                self.strings.append(StringRule(rule, re.compile(match.string), tuple(match.where)))
                regexes.append(match.string)
            elif isinstance(match, PatternMatch):
                pattern = Pattern.compile(match.pattern)
                self.patterns[pattern.root_type].append((rule, pattern))
                words.update(pattern.words)
        words |= self.names.words() | self.calls.words()
        words.discard("*")
        alternatives = [rf"\b{re.escape(w)}\b" for w in sorted(words)] + regexes
        self._prefilter = re.compile("|".join(f"(?:{a})" for a in alternatives) or r"(?!)")

    def may_match(self, text: str) -> bool:
        """False when no rule can possibly match: the file need not be parsed."""
        return self._prefilter.search(text) is not None
