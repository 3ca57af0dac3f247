"""Every finding as a JSON record, and the summary."""

from __future__ import annotations

import json

from rich.console import Console

from npu_migrate.model import FileOutcome
from npu_migrate.report.summary import Summary, all_findings, finding_dict


def write(console: Console, outcomes: list[FileOutcome], summary: Summary) -> None:
    findings = [finding_dict(display, finding) for display, finding in all_findings(outcomes)]
    console.file.write(json.dumps({"findings": findings, "summary": summary.as_dict()}, indent=2) + "\n")
