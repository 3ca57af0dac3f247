"""GitLab code quality (a JSON list of issues, as `artifacts:reports:codequality` reads it), each
path from `CI_PROJECT_DIR` (where set, as GitLab anchors them), else the repository's root."""

from __future__ import annotations

import hashlib
import json
import os

from rich.console import Console

from npu_migrate.model import Severity
from npu_migrate.report.formats import Report
from npu_migrate.report.summary import UNUSED, UNUSED_WHY, message

SEVERITY = {Severity.error: "critical", Severity.warning: "major", Severity.info: "info"}


def write(console: Console, report: Report) -> None:
    prints = report.fingerprints
    project = os.environ.get("CI_PROJECT_DIR")
    issues = (
        [
            {
                "description": f"{f.rule.code} {message(f)}",
                "check_name": f.rule.code,
                "fingerprint": prints[id(f)],
                "severity": SEVERITY[f.rule.severity],
                "location": {
                    "path": report.path(o.file.path, project),
                    "lines": {"begin": f.line, "end": f.end_line},
                },
            }
            for o in report.outcomes
            for f in o.result.findings
        ]
        + [
            {
                "description": f"not read: {why}",
                "check_name": "not-read",
                "fingerprint": hashlib.sha256(f"not-read\0{display}".encode()).hexdigest(),
                "severity": "critical",
                "location": {"path": report.path(display, project), "lines": {"begin": 1, "end": 1}},
            }
            for display, why in report.summary.unread + report.summary.errors
        ]
        + [
            {
                "description": UNUSED_WHY,
                "check_name": UNUSED,
                "fingerprint": hashlib.sha256(f"{UNUSED}\0{display}\0{line}".encode()).hexdigest(),
                "severity": "info",
                "location": {"path": report.path(display, project), "lines": {"begin": line, "end": line}},
            }
            for display, line in report.summary.unused_suppressions
        ]
    )
    console.file.write(json.dumps(issues, indent=2, ensure_ascii=False) + "\n")
