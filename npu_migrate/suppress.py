"""`scan --add-ignore`: a suppression comment for every finding that fails the gate, so that a
legacy repository adopts the check at once and only new CUDA code fails it. A comment goes at the
end of the first line of the finding where one can stand (not inside a multi-line string or a
backslash continuation), merged with a suppression already there; files are rewritten whole or
not at all, in their own encoding and line endings."""

from __future__ import annotations

import io
import re
import tokenize
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from npu_migrate.discover import kind_of
from npu_migrate.handlers.shell import IN_TEXT
from npu_migrate.model import FileOutcome, Finding
from npu_migrate.write import write_atomic

_EXISTING = re.compile(r"#\s*npu-migrate:\s*ignore\[(?P<codes>[^\]]*)\]")
_LINE = re.compile(rb"([^\r\n]*)(\r\n|\r|\n|$)")


@dataclass
class Added:
    comments: int = 0  # lines that got (or extended) a suppression
    files: int = 0
    suppressed: set[int] = field(default_factory=set)  # ids of the findings now suppressed
    unplaced: list[str] = field(default_factory=list)  # findings no comment could stand beside


def add_suppressions(outcomes: list[FileOutcome], wanted: dict[int, Finding]) -> Added:
    """Suppress the findings in `wanted` (by id) in their files."""
    added = Added()
    for outcome in outcomes:
        findings = [f for f in outcome.result.findings if id(f) in wanted]
        if not findings or outcome.file.skipped or outcome.result.error:
            continue
        source = outcome.file.path.read_bytes()
        kind = kind_of(outcome.file)
        python = kind in ("python", "setup.py")
        if not python and (kind not in _LINE_COMMENTS or outcome.file.path.suffix == ".json"):
            why = f"a {kind} file takes no comment from --add-ignore; --baseline records it instead"
            added.unplaced += [f"{outcome.file.display}:{f.line}: {f.rule.code}: {why}" for f in findings]
            continue
        encoding = tokenize.detect_encoding(io.BytesIO(source).readline)[0] if python else "utf-8"
        ends = _comment_lines(source) if python else _LINE_COMMENTS[kind](source)
        codes: dict[int, set[str]] = defaultdict(set)
        for finding in findings:
            spans = range(finding.line, finding.end_line + 1)
            line = next((n for n in spans if n in ends), None) if not _in_text(finding) else None
            if line is None:
                why = "no line of it can take a comment"
                added.unplaced.append(f"{outcome.file.display}:{finding.line}: {finding.rule.code}: {why}")
            else:
                codes[line].add(finding.rule.code)
                added.suppressed.add(id(finding))
        if not codes:
            continue
        lines = [m.groups() for m in _LINE.finditer(source)][:-1] or [(source, b"")]
        for number, wanted_codes in codes.items():
            text, end = lines[number - 1]
            lines[number - 1] = (_with_suppression(text.decode(encoding), wanted_codes).encode(encoding), end)
        write_atomic(outcome.file.path, b"".join(t + e for t, e in lines), read=source)
        added.comments += len(codes)
        added.files += 1
    return added


def _lines_without_continuation(source: bytes) -> set[int]:
    """A `#` comment may end any line but one continued by a backslash."""
    lines = source.decode("utf-8", errors="replace").splitlines()
    return {n for n, line in enumerate(lines, start=1) if not line.rstrip().endswith("\\")}


def _recipe_lines(source: bytes) -> set[int]:
    """A Makefile's recipe lines (the shell reads `#` as a comment there; in an assignment the
    spaces before it would join the value)."""
    return {n for n in _lines_without_continuation(source) if source.splitlines()[n - 1].startswith(b"\t")}


# Kinds of files (discover.file_kind) whose lines take a `#` comment at their end, and which.
# Not a notebook or JSON (no comments), a Dockerfile (whole-line comments only), C++, setup.cfg.
_LINE_COMMENTS: dict[str, Callable[[bytes], set[int]]] = {
    "shell": _lines_without_continuation,
    "requirements": _lines_without_continuation,
    "pyproject": _lines_without_continuation,
    "conda": _lines_without_continuation,
    "config": _lines_without_continuation,
    "makefile": _recipe_lines,
}


def _in_text(finding: Finding) -> bool:
    """A finding in a heredoc's text: a comment there would be text too."""
    return finding.held is not None and finding.held.reason == IN_TEXT.reason


def _comment_lines(source: bytes) -> set[int]:
    """The lines whose end a comment may follow: those with a NEWLINE, NL or COMMENT token."""
    kinds = (tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT)
    return {t.start[0] for t in tokenize.tokenize(io.BytesIO(source).readline) if t.type in kinds}


def _with_suppression(line: str, codes: set[str]) -> str:
    existing = _EXISTING.search(line)
    if existing is not None:
        merged = {c.strip() for c in existing["codes"].split(",") if c.strip()} | codes
        comment = f"# npu-migrate: ignore[{', '.join(sorted(merged))}]"
        return line[: existing.start()] + comment + line[existing.end() :]
    return f"{line.rstrip()}  # npu-migrate: ignore[{', '.join(sorted(codes))}]"
