"""Rules over files that are not Python: a handler (shell.py, dependencies.py, configs.py,
native.py) reads its kind of file with a real parser and lists the *sites* there, spans of bytes
with the text a rule may match (a variable's name, a package's name, a setting's value); this
module finds the rule that wins each site, makes the findings and edits the bytes of the sites
whose fix applies. Every other byte of the file stays as it was."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from npu_migrate.engine.fixes import substituted
from npu_migrate.engine.kinds import kind_of
from npu_migrate.model import Applicability, Finding

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
    held: str | None = None  # why no fix may apply here, as the handler sees it
    detail: str | None = None  # what the finding adds to its rule's message


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


def winner(matching: list[Rule]) -> Rule:
    """A user's rule before the catalog's, then one that supersedes the others."""
    ranked = sorted(matching, key=lambda r: r.builtin)
    beaten = {code for r in ranked for code in r.supersedes}
    return next((r for r in ranked if r.code not in beaten), ranked[0])


def fixed_text(rule: Rule, site: Site) -> str | None:
    """What the site's text becomes: a substitution on it, or a template whose `$NAME`s are the
    site's facts (None when the template needs a fact the site lacks)."""
    if rule.fix is None:
        return None
    if rule.fix.substitute:
        return substituted(site.text, rule.fix.substitute)
    text = rule.fix.template or ""
    for name, value in sorted(site.facts.items(), key=lambda item: -len(item[0])):
        text = text.replace(f"${name}", value)
    return None if "$" in text else text


def match_sites(
    data: bytes,
    sites: Iterable[Site],
    index: RuleIndex,
    enabled: frozenset[Applicability],
    content: str,
    lines: Lines | None = None,
) -> tuple[list[Finding], Edits]:
    """The findings of the rules of this content at these sites, and the edits of those applied.
    A site's text is edited where its rule's fix applies and nothing holds it back."""
    rules = [r for r in index.rules if kind_of(r.match).content == content]
    lines = lines or Lines(data)
    findings: list[Finding] = []
    edits = Edits()
    for site in sites:
        matching = [r for r in rules if kind_of(r.match).hit(r.match, site)]
        if not matching:
            continue
        rule = winner(matching)
        held = site.held if rule.fix else None
        fixed = None if held else fixed_text(rule, site)
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
        if applied and fixed is not None:
            edits.spans.append((site.start, site.end, fixed.encode()))
    findings.sort(key=lambda f: (f.line, f.column, f.rule.code))
    return findings, edits
