"""A finding's identity across edits: its file (relative to the repository's root, however the
scan named it), rule and matched code (whitespace-normalised), and how many identical matches come
before it in the file; never its line, so an unrelated edit above a finding keeps it the same
finding (for baselines, SARIF and GitLab)."""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

from npu_migrate.model import FileOutcome, Finding
from npu_migrate.report.anchor import anchored


def fingerprints(outcomes: list[FileOutcome], root: Path) -> dict[int, str]:
    """Each finding's fingerprint, by the finding's id()."""
    prints: dict[int, str] = {}
    for outcome in outcomes:
        if not outcome.result.findings:
            continue  # (naming a file through the root's links costs a walk of its path)
        where = anchored(outcome.file.path, root)
        seen: Counter[tuple[str, str]] = Counter()
        for finding in sorted(outcome.result.findings, key=lambda f: (f.line, f.column)):
            key = (finding.rule.code, " ".join(finding.code.split()))
            seen[key] += 1
            text = "\0".join([where, *key, str(seen[key])])
            prints[id(finding)] = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return prints


def docs_anchor(finding: Finding) -> str:
    """Where the rule's page is in the repository's rule catalog (docs/rules.md)."""
    return f"docs/rules.md#{finding.rule.code.lower()}-{finding.rule.name}"
