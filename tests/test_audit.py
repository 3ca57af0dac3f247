"""Nothing silent, on the bundled projects: every CUDA trace that benchmarks/audit.py's tokenizer
finds, in a project and in its migrated copy, carries a finding of a scan on its line."""

from __future__ import annotations

import pytest

from benchmarks.audit import Trace, reported_lines, traces_in, tree_traces
from tests.fixture_cases import FIXTURES, NAMES, run_cli


@pytest.mark.parametrize("tree", ["src", "expected"])
@pytest.mark.parametrize("name", NAMES)
def test_every_cuda_trace_carries_a_finding(name: str, tree: str) -> None:
    root = FIXTURES / name / tree
    scan = run_cli("scan", str(root), "--format", "json", "--no-cache", cwd=FIXTURES / name)
    reported = reported_lines(scan.stdout, root)
    traces = tree_traces(root)
    assert traces or tree == "expected", "a GPU project without CUDA traces proves nothing here"
    assert [t for t in traces if (t.file, t.line) not in reported] == []


def test_the_trace_finder_sees_code_not_prose() -> None:
    code = (
        '"""Runs on cuda."""\n'
        "import torch  # cuda\n"
        "from .cuda import helper\n"
        "cuda = torch.cuda.is_available()\n"
        "x = y.cuda()\n"
        'd = f"cuda:{rank}"\n'
        'label = "CUDA"\n'
        'b = "NCCL"\n'
        'print("on", "cuda" if ok else "cpu", to("gpu"))\n'
        "def cuda(self):\n    pass\n"
    )
    assert traces_in(code, "a.py") == [
        Trace("a.py", 4, "cuda"),
        Trace("a.py", 5, "cuda"),
        Trace("a.py", 6, "'cuda:{}'"),
        Trace("a.py", 8, "'nccl'"),
        Trace("a.py", 9, "'gpu'"),
    ]
