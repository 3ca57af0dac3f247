"""SARIF 2.1.0, as GitHub code scanning reads it: the rules with their pages as help, each
finding with its region, a fingerprint that survives edits above it, and the fix where the rule
has one (a replacement of the finding's region). Paths are relative to the repository's root,
named `%SRCROOT%` in `originalUriBaseIds`, whichever folder the scan ran from."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rich.console import Console

from npu_migrate.model import Finding, Severity
from npu_migrate.report.formats import Report
from npu_migrate.report.summary import UNUSED, UNUSED_WHY, label, message

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
ROOT = "%SRCROOT%"
LEVEL = {Severity.error: "error", Severity.warning: "warning", Severity.info: "note"}


def write(console: Console, report: Report) -> None:
    from importlib.metadata import version  # ~20 ms: paid by a SARIF report only, not by every run

    codes = sorted({f.rule.code for o in report.outcomes for f in o.result.findings})
    index = {code: i for i, code in enumerate(codes)}
    prints = report.fingerprints
    results = [
        _result(_artifact(report.path(o.file.path)), f, index[f.rule.code], prints[id(f)])
        for o in report.outcomes
        for f in o.result.findings
    ]
    home = installed_from()
    rules = [_rule(code, report, home) for code in codes]
    if report.summary.unused_suppressions:  # hygiene, a note: a rule of the tool's own
        rules.append({"id": UNUSED, "shortDescription": {"text": UNUSED_WHY}})
        results += [
            {
                "ruleId": UNUSED,
                "ruleIndex": len(codes),
                "level": "note",
                "message": {"text": UNUSED_WHY},
                "locations": [
                    {
                        "physicalLocation": {
                            "artifactLocation": _artifact(report.path(display)),
                            "region": {"startLine": line},
                        }
                    }
                ],
            }
            for display, line in report.summary.unused_suppressions
        ]
    log = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "npu-migrate",
                        "version": version("npu-migrate"),
                        **({"informationUri": home.page} if home else {}),
                        "rules": rules,
                    }
                },
                "originalUriBaseIds": {ROOT: {"uri": report.root.absolute().as_uri() + "/"}},
                "results": results,
                "invocations": [
                    {
                        "executionSuccessful": not report.summary.errors,
                        "toolExecutionNotifications": [
                            {"level": "error", "message": {"text": f"{name}: {error} (file left untouched)"}}
                            for name, error in report.summary.errors
                        ]
                        + [
                            {
                                "level": "error",
                                "message": {"text": f"{name}: not read: {why} (file left untouched)"},
                            }
                            for name, why in report.summary.unread
                        ],
                    }
                ],
            }
        ],
    }
    console.file.write(json.dumps(log, indent=2, ensure_ascii=False) + "\n")


@dataclass(frozen=True)
class Home:
    """Where this npu-migrate was installed from: its repository's page (or the checkout, as a
    file URI), and where that version's docs folder is."""

    page: str
    docs: str


def installed_from() -> Home | None:
    """This installation's source, as pip recorded it (PEP 610's direct_url.json): a git URL and
    the commit it was installed at (the recipes' `git+https://...@REV`), or a local checkout;
    None for an install from an index or an archive, which names no page with the docs."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        recorded = json.loads(distribution("npu-migrate").read_text("direct_url.json") or "null")
    except (PackageNotFoundError, ValueError):
        return None
    url = recorded.get("url") if isinstance(recorded, dict) else None
    if not isinstance(url, str):
        return None
    vcs = recorded.get("vcs_info")
    if isinstance(vcs, dict) and isinstance(vcs.get("commit_id"), str):
        page = url.removesuffix(".git")
        return Home(page, f"{page}/blob/{vcs['commit_id']}/docs")
    if "dir_info" in recorded:
        return Home(url, f"{url}/docs")
    return None


def _rule(code: str, report: Report, home: Home | None) -> dict[str, Any]:
    rule = report.rules().get(code)
    if rule is None:  # a rule that is no longer loaded: its code alone
        return {"id": code}
    from npu_migrate.rules.docs import rule_page

    anchor = f"{rule.code}-{rule.name}".lower()  # its heading in docs/rules.md, `### CODE name`
    return {
        "id": code,
        **({"helpUri": f"{home.docs}/rules.md#{anchor}"} if home else {}),
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": rule.why.strip()},
        "help": {"text": rule.why.strip(), "markdown": rule_page(rule)},
        "defaultConfiguration": {"level": LEVEL[rule.severity]},
        "properties": {"category": rule.category, "applicability": rule.applicability.value},
    }


def _artifact(path: str) -> dict[str, str]:
    """A file from the repository's root, as code scanning expects; one outside it, a file URI."""
    if Path(path).is_absolute():
        return {"uri": Path(path).as_uri()}
    return {"uri": quote(path), "uriBaseId": ROOT}


def _result(location: dict[str, str], finding: Finding, rule_index: int, fingerprint: str) -> dict[str, Any]:
    region = {
        "startLine": finding.line,
        "startColumn": finding.column,
        "endLine": finding.end_line,
        "endColumn": finding.end_column,
    }
    if finding.cell is not None:  # SARIF has no cells: the notebook is the location, the cell a property
        return {
            "ruleId": finding.rule.code,
            "ruleIndex": rule_index,
            "level": LEVEL[finding.rule.severity],
            "message": {"text": f"cell {finding.cell} line {finding.line}: {message(finding)}"},
            "locations": [{"physicalLocation": {"artifactLocation": location}}],
            "partialFingerprints": {"npuMigrate/v1": fingerprint},
            "properties": {"label": label(finding), "cell": finding.cell, "cellLine": finding.line},
        }
    result: dict[str, Any] = {
        "ruleId": finding.rule.code,
        "ruleIndex": rule_index,
        "level": LEVEL[finding.rule.severity],
        "kind": "informational" if label(finding) == "note" else "fail",
        "message": {"text": message(finding)},
        "locations": [{"physicalLocation": {"artifactLocation": location, "region": region}}],
        "partialFingerprints": {"npuMigrate/v1": fingerprint},
        "properties": {"label": label(finding), "applied": finding.applied},
    }
    if finding.replacement is not None and not finding.applied:
        result["fixes"] = [
            {
                "description": {"text": f"{finding.rule.code}: {label(finding)} fix"},
                "artifactChanges": [
                    {
                        "artifactLocation": location,
                        "replacements": [
                            {"deletedRegion": region, "insertedContent": {"text": finding.replacement}}
                        ],
                    }
                ],
            }
        ]
    return result
