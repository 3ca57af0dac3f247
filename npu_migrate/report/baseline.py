"""`--baseline FILE`: the findings a repository already had, by fingerprint (which survives edits
above a finding), so that the gate fails only on new ones; `--update-baseline` records them."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from npu_migrate.model import FileOutcome
from npu_migrate.report.anchor import anchored
from npu_migrate.report.fingerprint import fingerprints
from npu_migrate.write import write_output

VERSION = 1


class BaselineError(Exception):
    """The baseline file cannot be read; the message says why, in a line."""


def read_baseline(path: Path) -> Counter[str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BaselineError(f"no baseline {path}: record one with --update-baseline") from None
    except (OSError, ValueError) as exc:
        raise BaselineError(f"cannot read the baseline {path}: {exc}") from None
    findings = data.get("findings") if isinstance(data, dict) else None
    if not isinstance(findings, list) or data.get("version") != VERSION:
        raise BaselineError(f"{path} is not an npu-migrate baseline (version {VERSION})")
    return Counter(str(f.get("fingerprint")) for f in findings if isinstance(f, dict))


def check_replaceable(path: Path) -> None:
    """A file already at `path` may be replaced only when it is a baseline: a mistyped
    `--baseline src/train.py --update-baseline` must not turn a source into JSON."""
    if path.is_file() and path.stat().st_size:
        try:
            read_baseline(path)
        except BaselineError:
            raise BaselineError(f"{path} exists and is not an npu-migrate baseline; not replaced") from None


def write_baseline(path: Path, outcomes: list[FileOutcome], root: Path) -> int:
    """Record every finding, its file named from the repository's `root` (see report.anchor)."""
    prints = fingerprints(outcomes, root)
    findings = [
        {
            "fingerprint": prints[id(f)],
            "file": anchored(o.file.path, root),
            "line": f.line,
            "code": f.rule.code,
        }
        for o in outcomes
        for f in o.result.findings
    ]
    write_output(path, (json.dumps({"version": VERSION, "findings": findings}, indent=1) + "\n").encode())
    return len(findings)


def new_findings(outcomes: list[FileOutcome], known: Counter[str], root: Path) -> set[int]:
    """The ids of the findings the baseline does not hold (as many of a fingerprint as it holds
    are known; one more is new)."""
    prints = fingerprints(outcomes, root)
    left = Counter(known)
    new = set()
    for outcome in outcomes:
        for finding in outcome.result.findings:
            fingerprint = prints[id(finding)]
            if left[fingerprint] > 0:
                left[fingerprint] -= 1
            else:
                new.add(id(finding))
    return new
