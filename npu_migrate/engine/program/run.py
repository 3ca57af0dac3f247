"""What the files of one run decide for each other, read from their results after the per-file
pass: the names some file keeps calling (a rename the run does not make there: a dual-path file,
a guard hold), so that a test's mock of that name in another file is not renamed away from the
code it stands in for (mmengine's test mocks `torch.cuda.max_memory_allocated`, which its device
utilities, keeping an NPU path beside CUDA, still call)."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable

from npu_migrate.model import FileOutcome

_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_QUOTED = re.compile(r"[rRuU]?(['\"])(?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)\1")


def kept_names(outcomes: Iterable[FileOutcome], renaming: Collection[str]) -> dict[str, str]:
    """Dotted names a rule of `renaming` (rule codes with a rename fix) matched and the run leaves
    as they were (held, or with no fix here), with the first place each is kept (`file:line`)."""
    kept: dict[str, str] = {}
    for outcome in outcomes:
        for finding in outcome.result.findings:
            left = finding.held is not None or finding.replacement is None
            if finding.rule.code in renaming and left and _DOTTED.fullmatch(finding.code):
                kept.setdefault(finding.code, f"{outcome.file.display}:{finding.line}")
    return kept


def mocks_renamed(outcome: FileOutcome) -> list[str]:
    """The mock targets (quoted dotted names) the run renames in this file (or, in a scan, would)."""
    return [
        quoted.group("name")
        for f in outcome.result.findings
        if f.replacement is not None and f.held is None and (quoted := _QUOTED.fullmatch(f.code))
    ]


def renamed_mocks(outcome: FileOutcome, kept: dict[str, str]) -> dict[str, str]:
    """The mock targets this file's run renames that other files keep calling, with where."""
    mine = f"{outcome.file.display}:"
    return {
        name: kept[name]
        for name in mocks_renamed(outcome)
        if name in kept and not kept[name].startswith(mine)
    }
