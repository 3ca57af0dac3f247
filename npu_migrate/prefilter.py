"""The cheap first test before parsing: from the words a file contains, can any rule match it?
Each match kind tells the prefilter what its rules need (all words of one alternative, or for
string rules a regex right after a quote); a file that satisfies none is not parsed. A run keeps
its rule set's prefilter in the result cache (`to_json`), so that a later run can pass such a
Python file without loading the rules or the engine (what a pre-commit hook's run mostly sees)."""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from npu_migrate.engine.regex import RuleRegex, compile_rule_regex
from npu_migrate.model import ModulePath

WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ATTRIBUTE = re.compile(r"\.[ \t]*([A-Za-z_][A-Za-z0-9_]*)")
# Patterns that start at a line's start are searched from a literal they hold (`def`, `from`,
# `import`) and tried at that line's start: a MULTILINE `^` pattern is tried at every position
# of the text, ten times slower on a model zoo.
_DEFINITION = re.compile(r"(?:async[ \t]+)?(?:def|class)[ \t]+(\w+)")
_DEFINITION_AFTER_BREAK = re.compile(r"\n(?:async[ \t]+)?(?:def|class)[ \t]+(\w+)")
_RELATIVE_IMPORT = re.compile(r"[ \t]*from[ \t]+\.")
_FROM = re.compile(r"from[ \t]+\.")
_IMPORTED = re.compile(r"[ \t]*(?:from[ \t]+[\w.]+[ \t]+)?import[ \t]+(\([^)]*\)|(?:[^\n]*\\\n)*[^\n]*)")
_IMPORT = re.compile(r"import[ \t]")


def top_level_definitions(text: str) -> list[str]:
    """The names the file's column-0 `def`, `async def` and `class` statements define."""
    first = _DEFINITION.match(text)
    return ([first[1]] if first else []) + _DEFINITION_AFTER_BREAK.findall(text)


def _line_start(text: str, at: int) -> int:
    return text.rfind("\n", 0, at) + 1


def _imported(text: str) -> list[str]:
    """What each import statement names (`^[ \\t]*(from X )?import NAMES` at a line's start,
    NAMES: a parenthesised list or the line and those its backslashes continue it on)."""
    found, searched = [], 0
    for word in _IMPORT.finditer(text):
        start = _line_start(text, word.start())
        if start < searched:
            continue  # inside the last statement found (a continued line)
        match = _IMPORTED.match(text, start)
        if match is not None:
            found.append(match[1])
            searched = match.end()
    return found


def _relative_import(text: str) -> bool:
    """Whether a line starts `from .` (a relative import)."""
    return any(_RELATIVE_IMPORT.match(text, _line_start(text, at.start())) for at in _FROM.finditer(text))


def accessed(name: str) -> str:
    """The token for `name` reached as an attribute or imported by name (`.load`), which
    is much rarer in a file than the bare word (`load`)."""
    return "." + name


def components(pattern: str) -> frozenset[str]:
    """What a file must contain for a qualified-name pattern to resolve in it: every
    component appears in the import that binds the name or in its use, and the last one is
    reached as an attribute or named in an import."""
    parts = [p for p in pattern.split(".") if p != "*"]
    if len(parts) == 1 or pattern.endswith(".*"):
        return frozenset(parts)
    return frozenset([*parts[:-1], accessed(parts[-1])])


def word_counts(text: str) -> Counter[str]:
    """How often each word occurs in a file (the prefilter and the region finder share it)."""
    return Counter(WORD.findall(text))


def tokens(text: str, words: Iterable[str] | None = None) -> set[str]:
    """The words of a file, plus `.name` for names used as attributes or imported by name."""
    found = set(WORD.findall(text) if words is None else words)
    found.update(accessed(w) for w in ATTRIBUTE.findall(text))
    for names in _imported(text):
        found.update(accessed(w) for w in WORD.findall(names))
    return found


_IMPORT_WORD = re.compile(r"\bimport\b")


def imports_fragment(text: str, fragment: str) -> bool:
    """Whether a module whose name holds `fragment` may be imported: it is on a line with the
    word `import` (`import roi_align_cuda`, `from .roi_cuda import f`); elsewhere (`is_cuda`,
    `_cuda_rng_state`) it names no module. Each place the fragment is found, its line is read
    (one regex over the whole text tries every position: ten times slower)."""
    at = text.find(fragment)
    while at != -1:
        start = max(text.rfind("\n", 0, at), text.rfind("\r", 0, at)) + 1
        end = len(text)
        for stop in (text.find("\n", at), text.find("\r", at)):
            end = stop if stop != -1 and stop < end else end
        if _IMPORT_WORD.search(text, start, end):
            return True
        at = text.find(fragment, end)
    return False


def spelled_by_the_module(text: str, where: ModulePath) -> set[str]:
    """The words a file spells without writing them: its relative imports stand for its
    package's name (`from ..utils`), its top-level definitions for `<module>.<name>`."""
    words: set[str] = set()
    if where.package and _relative_import(text):
        words.update(where.package.split("."))
    defined = top_level_definitions(text) if where.name else []
    if defined:
        words.update(where.name.split("."))
        words.update(accessed(name) for name in defined)
    return words


def _literal(regex: str) -> bytes | None:
    """The text a regex anchored at both ends matches, where it matches only one (no regex
    syntax between the anchors), else None."""
    core = regex.removeprefix("^").removesuffix("$")
    return core.encode() if core and re.escape(core) == core else None


class Prefilter:
    def __init__(self) -> None:
        self.alternatives: set[frozenset[str]] = set()
        self._regexes: list[str] = []
        self._regex: RuleRegex | None = None
        self._fragments: list[str] = []

    def need(self, *alternatives: frozenset[str]) -> None:
        """A rule matches only in files that contain every token of one of `alternatives`."""
        self.alternatives.update(alternatives)
        self.__dict__.pop("_spelled", None)  # may_spell's words, read again

    def need_regex(self, regex: str) -> None:
        """A string rule: its regex must match a literal's whole text, so in the source it
        starts right after an opening quote (prose in comments does not count)."""
        self._regexes.append(regex)
        self._regex = None  # compiled, all in one, when first needed
        self.__dict__.pop("_literals", None)

    def need_fragment(self, fragment: str) -> None:
        """A rule about imported modules whose names hold `fragment` (`_cuda` in
        `my_kernels_cuda`)."""
        self._fragments.append(fragment)

    def may_match(self, text: str, words: Iterable[str] | None = None) -> bool:
        """`words`: the file's words, where the caller has them already."""
        if any(imports_fragment(text, fragment) for fragment in self._fragments):
            return True
        if self._regexes and self._regex is None:
            self._regex = compile_rule_regex("[\"'](?:" + "|".join(f"(?:{r})" for r in self._regexes) + ")")
        if self._regex is not None and self._regex.search(text):
            return True
        found = tokens(text, words)
        return any(needs <= found for needs in self.alternatives)

    def may_spell(self, data: bytes) -> bool:
        """A quick test that may_match passes: every token of one alternative occurs in the
        bytes, as a substring, or the text a literal regex matches does (a file that needs
        another regex or a fragment passes)."""
        literals = [literal for literal in self._literals if literal is not None]
        if self._fragments or len(literals) < len(self._regexes):
            return True
        if any(literal in data for literal in literals):
            return True
        if any(word not in data for word in self._common):  # one search rules out every alternative
            return False
        return any(all(word in data for word in words) for words in self._spelled)

    @functools.cached_property
    def _literals(self) -> list[bytes | None]:
        """Each regex's one text where it matches only that (`^flash_attention_2$`), else None."""
        return [_literal(regex) for regex in self._regexes]

    @functools.cached_property
    def _spelled(self) -> list[tuple[bytes, ...]]:
        """Each alternative's words as bytes, the longest (the likely rarest) first."""
        return [
            tuple(sorted((t.lstrip(".").encode() for t in needs), key=len, reverse=True))
            for needs in self.alternatives
        ]

    @functools.cached_property
    def _common(self) -> tuple[bytes, ...]:
        """The words every alternative needs (the profiler rules' `profiler`), longest first."""
        if not self._spelled:
            return ()
        common = set(self._spelled[0]).intersection(*self._spelled[1:])
        return tuple(sorted(common, key=len, reverse=True))

    def may_match_module(self, text: str, counts: Counter[str], where: ModulePath) -> bool:
        """`may_match` for a Python file (`text` decoded as latin-1) that is module `where`."""
        return self.may_match(text, counts.keys() | spelled_by_the_module(text, where))

    def to_json(self) -> dict[str, Any]:
        return {
            "alternatives": sorted(sorted(a) for a in self.alternatives),
            "regexes": self._regexes,
            "fragments": self._fragments,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Prefilter:
        prefilter = cls()
        prefilter.need(*(frozenset(a) for a in data["alternatives"]))
        for regex in data["regexes"]:
            prefilter.need_regex(regex)
        for fragment in data.get("fragments", ()):
            prefilter.need_fragment(fragment)
        return prefilter
