"""Suppression comments: `# npu-migrate: ignore[NPU101, NPU103]` on a line a finding spans (or
`# npu-migrate: ignore` for every rule), `# npu-migrate: ignore-file[...]` anywhere for the whole
file. flake8's and ruff's `# noqa: NPU103` is honoured for the codes of ours it names (the others
are their linters'); a bare `# noqa` is not: it is meant for those linters, and letting a
line-length waiver hide a `.cuda()` would open the gate unseen. A suppressed finding is neither
reported nor fixed (its code is held as it is), and a suppression that suppresses nothing is
reported, so that stale ones do not pile up."""

from __future__ import annotations

import bisect
import io
import re
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass, field

# no file without one of these has a suppression: the cheap test before reading comments
_MARKER = re.compile(rb"npu-migrate:|noqa\s*:[^\n]*NPU", re.IGNORECASE)
# `ignore`, `ignore-file`, each with or without `[codes]`; an `ignore[` never closed is no
# suppression at all (it would otherwise act as a bare `ignore`, silencing every rule).
_COMMENT = re.compile(r"#\s*npu-migrate:\s*ignore(?P<file>-file)?(?:\[(?P<codes>[^\]\n]*)\]|(?![\w\[-]))")
_NOQA = re.compile(r"#\s*noqa\s*:\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*)", re.IGNORECASE)
OURS = "NPU"  # the codes of ours a noqa comment may name
_LINE_COMMENT = re.compile(rb"(?:^|(?<=[ \t]))#[^\n]*", re.MULTILINE)  # `#` opening a line's comment


def marked(source: bytes) -> bool:
    """Whether the file may hold a suppression: the cheap test before looking for comments."""
    return _MARKER.search(source) is not None


@dataclass(frozen=True)
class Suppression:
    line: int
    codes: frozenset[str] | None  # None: every rule
    whole_file: bool
    noqa: bool = False  # written as flake8's noqa comment

    def covers(self, code: str, start: int, end: int) -> bool:
        return (self.whole_file or start <= self.line <= end) and (self.codes is None or code in self.codes)

    @property
    def text(self) -> str:
        if self.noqa:
            return f"# noqa: {', '.join(sorted(self.codes or ()))}"
        codes = f"[{', '.join(sorted(self.codes))}]" if self.codes is not None else ""
        return f"# npu-migrate: ignore{'-file' if self.whole_file else ''}{codes}"


@dataclass
class Suppressions:
    """A file's suppression comments, and which of them suppressed something in this run."""

    found: list[Suppression]
    used: set[Suppression] = field(default_factory=set)
    hits: int = 0  # findings suppressed

    @classmethod
    def in_lines(cls, source: bytes, text: Iterable[tuple[int, int]] = ()) -> Suppressions:
        """The comments of a file whose comments start with `#` at a line's start or after a
        blank, and are not Python (a requirements file, a Makefile, YAML); `text`: the byte
        spans that are a value's text (a quoted YAML scalar), where a `#` opens no comment."""
        if not marked(source):
            return cls([])
        spans = [(m.start(), m.end()) for m in _LINE_COMMENT.finditer(source)]
        inside = sorted(text)
        return cls.in_comments(source, [s for s in spans if not _within(s[0], inside)])

    @classmethod
    def in_comments(cls, source: bytes, comments: Iterable[tuple[int, int]]) -> Suppressions:
        """The suppressions in these byte spans, each a comment (a shell script's, as its parser
        found them: a heredoc's body or a quoted argument is not one); not looked for at all in
        a file without the marker."""
        if not marked(source):
            return cls([])
        found = []
        line, counted = 1, 0  # lines counted up to offset `counted`, as the spans come in order
        for start, end in sorted(s for s in comments if marked(source[s[0] : s[1]])):
            line, counted = line + source.count(b"\n", counted, start), start
            if suppression := _parse(source[start:end].decode("utf-8", errors="replace"), line):
                found.append(suppression)
        return cls(found)

    @classmethod
    def of(cls, source: bytes) -> Suppressions:
        """The comments (COMMENT tokens only: the text inside a string suppresses nothing)."""
        found = []
        try:
            for token in tokenize.tokenize(io.BytesIO(source).readline):
                if token.type == tokenize.COMMENT and (suppression := _parse(token.string, token.start[0])):
                    found.append(suppression)
        except (tokenize.TokenError, SyntaxError, UnicodeDecodeError):
            pass  # the file does not tokenize: the parse reports it
        return cls(found)

    def reason(self, code: str, start: int, end: int) -> str | None:
        """Why a finding of `code` over lines start..end is suppressed, or None."""
        for suppression in self.found:
            if suppression.covers(code, start, end):
                self.used.add(suppression)
                self.hits += 1
                return f"suppressed by `{suppression.text}` on line {suppression.line}"
        return None

    def unused(self) -> list[int]:
        return sorted(s.line for s in self.found if s not in self.used)


def _within(offset: int, spans: list[tuple[int, int]]) -> bool:
    at = bisect.bisect_right(spans, (offset, float("inf"))) - 1
    return at >= 0 and spans[at][0] <= offset < spans[at][1]


def _parse(comment: str, line: int) -> Suppression | None:
    """The suppression a comment on `line` makes, if any: ours, or a `# noqa` naming our codes."""
    if match := _COMMENT.search(comment):
        return Suppression(line, _codes(match["codes"]), bool(match["file"]))
    if match := _NOQA.search(comment):
        ours = frozenset(
            code for code in re.split(r"[\s,]+", match["codes"].upper()) if code.startswith(OURS)
        )
        return Suppression(line, ours, whole_file=False, noqa=True) if ours else None
    return None


def _codes(listed: str | None) -> frozenset[str] | None:
    return None if listed is None else frozenset(c.strip().upper() for c in listed.split(",") if c.strip())
