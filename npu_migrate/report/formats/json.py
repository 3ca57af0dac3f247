"""Every finding as a JSON record (with its end column, fingerprint and the rule's page in the
catalog), and the summary."""

from __future__ import annotations

import json

from rich.console import Console

from npu_migrate.report.fingerprint import docs_anchor
from npu_migrate.report.formats import Report
from npu_migrate.report.summary import finding_dict


def write(console: Console, report: Report) -> None:
    prints = report.fingerprints
    findings = [
        {**finding_dict(o.file.display, f), "fingerprint": prints[id(f)], "docs": docs_anchor(f)}
        for o in report.outcomes
        for f in o.result.findings
    ]
    data = {"findings": findings, "summary": report.summary.as_dict()}
    console.file.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
