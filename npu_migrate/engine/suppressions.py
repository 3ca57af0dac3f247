"""Suppression comments: `# npu-migrate: ignore[NPU101, NPU103]` on a line a finding spans (or
`# npu-migrate: ignore` for every rule), `# npu-migrate: ignore-file[...]` anywhere for the whole
file. A suppressed finding is neither reported nor fixed (its code is held as it is), and a
suppression that suppresses nothing is reported, so that stale ones do not pile up."""

from __future__ import annotations

import bisect
import io
import re
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass, field

MARKER = b"npu-migrate:"  # no file without it has a suppression: the cheap test
# `ignore`, `ignore-file`, each with or without `[codes]`; an `ignore[` never closed is no
# suppression at all (it would otherwise act as a bare `ignore`, silencing every rule).
_COMMENT = re.compile(r"#\s*npu-migrate:\s*ignore(?P<file>-file)?(?:\[(?P<codes>[^\]\n]*)\]|(?![\w\[-]))")
_LINE_COMMENT = re.compile(rb"(?:^|(?<=[ \t]))#[^\n]*", re.MULTILINE)  # `#` opening a line's comment


@dataclass(frozen=True)
class Suppression:
    line: int
    codes: frozenset[str] | None  # None: every rule
    whole_file: bool

    def covers(self, code: str, start: int, end: int) -> bool:
        return (self.whole_file or start <= self.line <= end) and (self.codes is None or code in self.codes)

    @property
    def text(self) -> str:
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
        if MARKER not in source:
            return cls([])
        spans = [(m.start(), m.end()) for m in _LINE_COMMENT.finditer(source)]
        inside = sorted(text)
        return cls.in_comments(source, [s for s in spans if not _within(s[0], inside)])

    @classmethod
    def in_comments(cls, source: bytes, comments: Iterable[tuple[int, int]]) -> Suppressions:
        """The suppressions in these byte spans, each a comment (a shell script's, as its parser
        found them: a heredoc's body or a quoted argument is not one); not looked for at all in
        a file without the marker."""
        if MARKER not in source:
            return cls([])
        found = []
        line, counted = 1, 0  # lines counted up to offset `counted`, as the spans come in order
        for start, end in sorted(s for s in comments if MARKER in source[s[0] : s[1]]):
            match = _COMMENT.search(source[start:end].decode("utf-8", errors="replace"))
            if match:
                line, counted = line + source.count(b"\n", counted, start), start
                found.append(Suppression(line, _codes(match["codes"]), bool(match["file"])))
        return cls(found)

    @classmethod
    def of(cls, source: bytes) -> Suppressions:
        """The comments (COMMENT tokens only: the text inside a string suppresses nothing)."""
        found = []
        try:
            for token in tokenize.tokenize(io.BytesIO(source).readline):
                if token.type == tokenize.COMMENT and (match := _COMMENT.search(token.string)):
                    found.append(Suppression(token.start[0], _codes(match["codes"]), bool(match["file"])))
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


def _codes(listed: str | None) -> frozenset[str] | None:
    return None if listed is None else frozenset(c.strip().upper() for c in listed.split(",") if c.strip())
