"""Which change of a migration breaks it: verify's step beyond msprobe. Where `verify TREE` finds
the migrated copy diverging, the copy is made again without one rule at a time (the unsafe ones
first: they change numerics, the safe ones are exact renames); the rule whose absence makes the
divergence go is the culprit, and then the file of its changes that, left unmigrated, does too."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from npu_migrate.model import Applicability, FileOutcome, Finding
from npu_migrate.pipeline import RuleSource


@dataclass(frozen=True)
class Culprit:
    code: str  # the rule
    file: str  # the file whose changes by that rule make the difference ("" when not one alone)
    changes: list[Finding]  # that rule's changes there

    def describe(self) -> str:
        where = self.file or "its changes together"
        lines = [f"the divergence comes from {self.code} in {where}:"]
        for change in self.changes[:5]:
            lines.append(f"    line {change.line}: {change.code.splitlines()[0]}  ->  {change.replacement}")
        return "\n".join(lines)


Migrate = Callable[[RuleSource], list[FileOutcome]]  # the same files, migrated with these rules
Write = Callable[[list[FileOutcome], Path], None]  # a migrated copy of the tree, into a new folder
Passes = Callable[[Path], bool]  # whether verify passes on a migrated copy


def find_culprit(
    outcomes: list[FileOutcome],
    rules: RuleSource,
    migrate: Migrate,
    write: Write,
    passes: Passes,
    progress: Callable[[str], None] = lambda _: None,
) -> Culprit | None:
    """The rule (and file) whose changes make the copy diverge, or None when no single rule's
    absence makes it pass (the bug is elsewhere, or needs two changes together). `progress`
    hears which copy is tried."""
    applied = [(o, f) for o in outcomes for f in o.result.findings if f.applied]
    codes = list(dict.fromkeys(f.rule.code for _, f in sorted(applied, key=_numerics_first)))
    with tempfile.TemporaryDirectory(prefix="npu-migrate-bisect-") as work:
        for number, code in enumerate(codes):
            progress(f"bisecting: the copy without {code}'s changes ({number + 1} of {len(codes)} rules)")
            without = migrate(replace(rules, without=rules.without | {code}))
            write(without, Path(work) / f"without-{number}")
            if not passes(Path(work) / f"without-{number}"):
                continue
            files = list(dict.fromkeys(o.file.display for o, f in applied if f.rule.code == code))
            for index, display in enumerate(files):
                progress(
                    f"bisecting: {code}'s changes undone in {display} ({index + 1} of {len(files)} files)"
                )
                mixed = [
                    w if o.file.display == display else o for o, w in zip(outcomes, without, strict=True)
                ]
                write(mixed, Path(work) / f"without-{number}-in-{index}")
                if passes(Path(work) / f"without-{number}-in-{index}"):
                    changes = [f for o, f in applied if f.rule.code == code and o.file.display == display]
                    return Culprit(code, display, changes)
            return Culprit(code, "", [f for _, f in applied if f.rule.code == code])
    return None


def _numerics_first(pair: tuple[FileOutcome, Finding]) -> int:
    """Unsafe fixes (fused operators, changed numerics) are tried before exact renames."""
    return 0 if pair[1].rule.applicability is Applicability.unsafe else 1
