"""How much name resolution costs: our import-table resolution against libcst's
QualifiedNameProvider, on a synthetic tree built from the bundled GPU projects.

    python benchmarks/scan_speed.py [--copies N]

Prints seconds and lines/second for: parse only (the floor), parse + QualifiedNameProvider
(the TorchFix approach, no rules at all), and the full npu-migrate scan (parse + resolution +
every rule), all single-process on the same files."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, QualifiedNameProvider

from npu_migrate.engine.index import RuleIndex
from npu_migrate.engine.source import migrate_source
from npu_migrate.rules.load import load_rules

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def corpus(copies: int) -> list[bytes]:
    sources = [p.read_bytes() for p in sorted(FIXTURES.glob("*/src/*.py")) if p.name != "broken.py"]
    return sources * copies


def timed(label: str, lines: int, work: Callable[[], None]) -> float:
    start = time.perf_counter()
    work()
    seconds = time.perf_counter() - start
    print(f"{label:<44} {seconds:7.2f} s  {lines / seconds:>9,.0f} lines/s")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--copies", type=int, default=40)
    args = parser.parse_args()
    files = corpus(args.copies)
    lines = sum(f.count(b"\n") for f in files)
    print(f"{len(files)} files, {lines:,} lines")
    index = RuleIndex(load_rules())

    def parse_only() -> None:
        for source in files:
            cst.parse_module(source)

    def qualified_names() -> None:
        class Touch(cst.CSTVisitor):
            METADATA_DEPENDENCIES = (QualifiedNameProvider,)

            def visit_Attribute(self, node: cst.Attribute) -> None:
                self.get_metadata(QualifiedNameProvider, node, None)

        for source in files:
            MetadataWrapper(cst.parse_module(source)).visit(Touch())

    def our_scan() -> None:
        for source in files:
            migrate_source(source, index)

    floor = timed("parse only (floor)", lines, parse_only)
    qnp = timed("parse + QualifiedNameProvider (no rules)", lines, qualified_names)
    ours = timed(f"npu-migrate scan ({len(index.rules)} rules)", lines, our_scan)
    print(f"QualifiedNameProvider: {qnp / floor:.1f}x the parse; npu-migrate: {ours / floor:.1f}x the parse")
    print(f"npu-migrate scan is {qnp / ours:.1f}x faster than resolution alone with QualifiedNameProvider")


if __name__ == "__main__":
    main()
