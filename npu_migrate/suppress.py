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
from dataclasses import dataclass, field

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
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
        ends = _comment_lines(source)
        codes: dict[int, set[str]] = defaultdict(set)
        for finding in findings:
            line = next((n for n in range(finding.line, finding.end_line + 1) if n in ends), None)
            if line is None:
                added.unplaced.append(f"{outcome.file.display}:{finding.line}: {finding.rule.code}")
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
