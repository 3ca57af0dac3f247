"""Rules over files that are not Python: a handler (shell.py, dependencies.py, configs.py,
native.py) reads its kind of file with a real parser and lists the *sites* there, spans of bytes
with the text a rule may match (a variable's name, a package's name, a setting's value); this
module finds the rule that wins each site, makes the findings and edits the bytes of the sites
whose fix applies. Every other byte of the file stays as it was."""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from npu_migrate.engine.fixes import substituted
from npu_migrate.engine.kinds import kind_of
from npu_migrate.engine.suppressions import Suppressions
from npu_migrate.model import Applicability, FileResult, Finding, Hold

if TYPE_CHECKING:
    from npu_migrate.engine.index import RuleIndex
    from npu_migrate.rules.schema import Rule


@dataclass(frozen=True)
class Site:
    kind: str  # what it is, as the match kinds ask (engine/kinds: each names the sites it matches)
    start: int  # byte offsets in the file
    end: int
    text: str  # what a rule's regex matches; what a fix rewrites (the bytes start:end)
    facts: Mapping[str, str] = field(default_factory=dict)  # what else a kind may ask, or a template use
    held: Hold | None = None  # why no fix may apply here, as the handler sees it
    no_new_line: Hold | None = None  # why no line may be added before it (an add_line fix)
    detail: str | None = None  # what the finding adds to its rule's message
    read: bool = True  # the program reads the name here (not a message's text)


class Lines:
    """Byte offsets to 1-based lines and columns, for one file."""

    def __init__(self, data: bytes) -> None:
        self._starts = [0]
        at = data.find(b"\n")
        while at != -1:
            self._starts.append(at + 1)
            at = data.find(b"\n", at + 1)

    def point(self, offset: int) -> tuple[int, int]:
        line = bisect_right(self._starts, offset)
        return line, offset - self._starts[line - 1] + 1


@dataclass
class Edits:
    """Byte edits to one file: (start, end, new bytes), applied last to first."""

    spans: list[tuple[int, int, bytes]] = field(default_factory=list)

    def apply(self, data: bytes) -> bytes:
        for start, end, text in sorted(self.spans, reverse=True):
            data = data[:start] + text + data[end:]
        return data


@dataclass
class Matched:
    """What the rules found at a file's sites."""

    findings: list[Finding]
    edits: Edits
    overridden: list[str]  # codes of catalog rules a user rule beat at some site


def site_result(matched: Matched, data: bytes, suppressions: Suppressions) -> FileResult:
    """A handler's result: its findings, the file with its edits (None: unchanged), the catalog
    rules a user's rule overrode, and what its suppression comments did."""
    return FileResult(
        findings=matched.findings,
        new_source=matched.edits.apply(data) if matched.edits.spans else None,
        overridden=matched.overridden,
        suppressed=suppressions.hits,
        unused_suppressions=suppressions.unused(),
    )


def winner(matching: list[Rule]) -> Rule:
    """A user's rule before the catalog's, then one that supersedes the others."""
    ranked = sorted(matching, key=lambda r: r.builtin)
    beaten = {code for r in ranked for code in r.supersedes}
    return next((r for r in ranked if r.code not in beaten), ranked[0])


def _beaten_beside(candidates: list[tuple[Site, list[Rule]]]) -> set[tuple[int, int, str]]:
    """The rules a site's rules beat at the sites within it: at the same text (a package a conda
    install names is both a word and a requirement), or inside (a pipeline's rule at its
    commands): (start, end, code)."""
    beating = [(site, code) for site, matching in candidates for rule in matching for code in rule.supersedes]
    return {
        (inner.start, inner.end, code)
        for outer, code in beating
        for inner, _ in candidates
        if outer.start <= inner.start and inner.end <= outer.end
    }


def _expanded(template: str, site: Site) -> tuple[str, list[str]]:
    """A template with the site's facts in its `$NAME`s, and the names the site lacks."""
    for name, value in sorted(site.facts.items(), key=lambda item: -len(item[0])):
        template = template.replace(f"${name}", value)
    return template, re.findall(r"\$([A-Z_]+)", template)


LACKING = "the fix lacks a value"  # the summaries' reason (model.Hold)


def _fix(rule: Rule, site: Site) -> tuple[str | None, Hold | None]:
    """What the site's text becomes (or the line added before it), or why the fix cannot apply
    (with the line to add by hand, where that is what the fix would do)."""
    fix = rule.fix
    if fix is None:
        return None, None
    if fix.substitute:
        return (None, site.held) if site.held else (substituted(site.text, fix.substitute), None)
    text, lacking = _expanded(fix.add_line or fix.template or "", site)
    if lacking:
        return None, Hold(LACKING, f"the fix needs ${', $'.join(lacking)}, which `{site.text}` does not give")
    held = site.held or (site.no_new_line if fix.add_line else None)
    if held:
        return None, held.detailed(f"`{text}`") if fix.add_line else held
    return text, None


class _Decided(NamedTuple):
    site: Site
    rule: Rule
    fixed: str | None  # what the site becomes, where the fix applies
    held: Hold | None


def _renamed_everywhere_or_nowhere(decided: list[_Decided], lines: Lines) -> list[_Decided]:
    """A name the kind renames (a shell variable) is renamed at every site the program reads it,
    or at none: renamed where it is set but not where a heredoc, an `eval` or a Makefile's
    `ifdef` reads it, one variable would become two."""
    named: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, (site, rule, _, _) in enumerate(decided):
        if kind_of(rule.match).one_name:
            named[(rule.code, site.text)].append(i)
    for (_, name), members in named.items():
        stuck = next((decided[i] for i in members if decided[i].held and decided[i].site.read), None)
        if stuck is None or stuck.held is None:
            continue
        why = Hold(
            "renamed only in part",
            f"`{name}` is also read at line {lines.point(stuck.site.start)[0]}, where it is not renamed "
            f"({stuck.held.reason}): renamed here alone, one variable would become two; "
            "rename every use by hand",
        )
        for i in members:
            if decided[i].fixed is not None:
                decided[i] = decided[i]._replace(fixed=None, held=why)
    return decided


def _line_break(data: bytes, offset: int) -> bytes:
    """The line break of the line at `offset` (a line added before it ends the same way), or
    the file's where that line has none."""
    end = data.find(b"\n", offset)
    crlf = data[end - 1 : end] == b"\r" if end > 0 else b"\r\n" in data
    return b"\r\n" if crlf else b"\n"


def match_sites(
    data: bytes,
    sites: Iterable[Site],
    index: RuleIndex,
    enabled: frozenset[Applicability],
    contents: Collection[str],
    lines: Lines | None = None,
    suppressions: Suppressions | None = None,
) -> Matched:
    """The findings of the rules of these contents (a script's shell and the requirements its
    pip installs) at these sites, and the edits of those applied. A site's text is edited where
    its rule's fix applies and nothing holds it back."""
    rules = [r for r in index.rules if kind_of(r.match).content in contents]
    lines = lines or Lines(data)
    findings: list[Finding] = []
    edits = Edits()
    overridden: list[str] = []
    candidates = [(site, [r for r in rules if kind_of(r.match).hit(r.match, site)]) for site in sites]
    beaten = _beaten_beside(candidates)
    decided: list[_Decided] = []
    for site, found in candidates:
        matching = [r for r in found if (site.start, site.end, r.code) not in beaten]
        if not matching:
            continue
        rule = winner(matching)
        catalog = [r for r in matching if r.builtin]
        if not rule.builtin and catalog:  # the catalog's finding a user's rule replaced
            overridden.append(winner(catalog).code)
        if rule.code in index.silenced:  # the configuration leaves it out: neither reported nor fixed
            continue
        line, end_line = lines.point(site.start)[0], lines.point(site.end)[0]
        if suppressions is not None and suppressions.reason(rule.code, line, end_line):
            continue  # neither reported nor fixed
        decided.append(_Decided(site, rule, *_fix(rule, site)))
    for site, rule, fixed, held in _renamed_everywhere_or_nowhere(decided, lines):
        applied = fixed is not None and rule.applicability in enabled
        (line, column), (end_line, end_column) = lines.point(site.start), lines.point(site.end)
        findings.append(
            Finding(
                rule=rule.info,
                line=line,
                column=column,
                end_line=end_line,
                end_column=end_column,
                code=site.text,
                replacement=fixed,
                applied=applied,
                held=held,
                detail=site.detail,
            )
        )
        if applied and fixed is not None and rule.fix and rule.fix.add_line:
            start = site.start - column + 1
            indent = re.match(rb"[ \t]*", data[start : site.start])
            added = (indent[0] if indent else b"") + fixed.encode() + _line_break(data, site.start)
            edits.spans.append((start, start, added))
        elif applied and fixed is not None:
            edits.spans.append((site.start, site.end, fixed.encode()))
    findings.sort(key=lambda f: (f.line, f.column, f.rule.code))
    return Matched(findings, edits, overridden)
