"""JUnit XML, for CI systems that show test reports: a test suite per file, a test case per
finding, failed where the finding fails the gate (--fail-on; notes never do); a file that could
not be read or checked is a test case in error, so the report never shows a green run that
checked nothing."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from rich.console import Console

from npu_migrate.report.formats import Report
from npu_migrate.report.summary import label, message


def write(console: Console, report: Report) -> None:
    suites = ET.Element("testsuites", name="npu-migrate")
    total = failed = 0
    for outcome in report.outcomes:
        findings = outcome.result.findings
        if not findings:
            continue
        failing = [f for f in findings if report.fail_on.fails(f)]
        name = report.path(outcome.file.path)
        suite = ET.SubElement(suites, "testsuite", name=name)
        suite.set("tests", str(len(findings)))
        suite.set("failures", str(len(failing)))
        for f in findings:
            case = ET.SubElement(
                suite, "testcase", name=f"{f.rule.code} at {f.line}:{f.column}", classname=name
            )
            if f in failing:
                failure = ET.SubElement(case, "failure", message=message(f), type=label(f))
                failure.text = f"{name}:{f.line}:{f.column}: {f.rule.code} {message(f)}"
        total += len(findings)
        failed += len(failing)
    problems = [*report.summary.unread, *report.summary.errors]
    for display, why in problems:
        name = report.path(display)
        suite = ET.SubElement(suites, "testsuite", name=name, tests="1", failures="0", errors="1")
        case = ET.SubElement(suite, "testcase", name="read and check the file", classname=name)
        ET.SubElement(
            case, "error", message=why, type="not read"
        ).text = f"{name}: {why} (file left untouched)"
    suites.set("tests", str(total + len(problems)))
    suites.set("failures", str(failed))
    suites.set("errors", str(len(problems)))
    ET.indent(suites)
    console.file.write(ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n")
