"""What the reports of an apply say once it has written: a rewritten file's findings at the lines
they now have (an added import moves everything below it), and with --out each file named as its
copy, which is what the user opens next."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from npu_migrate.discover import printable
from npu_migrate.model import FileOutcome, Finding
from npu_migrate.write import Written


def as_written(
    outcomes: list[FileOutcome], written: Written, root: Path | None, out_dir: Path | None
) -> list[FileOutcome]:
    rewritten = {id(o) for o in written.written}
    result = []
    for outcome in outcomes:
        file, found = outcome.file, outcome.result
        if id(outcome) in rewritten and file.data is not None and found.new_source is not None:
            moved = line_map(file.data, found.new_source)
            found = replace(
                found,
                findings=[_moved(f, moved) for f in found.findings],
                removed_imports=[(moved(line), name) for line, name in found.removed_imports],
            )
        if out_dir is not None and root is not None:
            file = replace(file, display=printable(str(out_dir / file.path.relative_to(root))))
        result.append(FileOutcome(file, found))
    return result


def line_map(old: bytes, new: bytes) -> Callable[[int], int]:
    """Old line number -> new line number; a line inside a rewritten block goes to the block's
    counterpart, as far down as it reaches."""
    a, b = old.splitlines(), new.splitlines()
    blocks = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()

    def moved(line: int) -> int:
        for _, i1, i2, j1, j2 in blocks:
            if i1 <= line - 1 < i2:
                return j1 + min(line - 1 - i1, max(j2 - j1 - 1, 0)) + 1
        return max(len(b), 1)

    return moved


def _moved(finding: Finding, moved: Callable[[int], int]) -> Finding:
    return replace(finding, line=moved(finding.line), end_line=moved(finding.end_line))
