"""The command line the per-model benchmarks share: `--only NAME ...`, one measurement per model,
a closing count, and exit 1 when any model is not as expected."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar


class Named(Protocol):
    @property
    def name(self) -> str: ...


M = TypeVar("M", bound=Named)


def run(
    doc: str, models: Sequence[M], measure: Callable[[M], bool], announce: Callable[[M], str] | None = None
) -> int:
    """Measure the models `--only` names (all by default); `announce` says what each needs first."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", help="the models to run, by name")
    args = parser.parse_args()
    chosen = [m for m in models if not args.only or m.name in args.only]
    if not chosen:
        print(f"no such model; the models: {', '.join(m.name for m in models)}", file=sys.stderr)
        return 2
    if announce is not None:
        for model in chosen:
            print(announce(model))
    results = {model.name: measure(model) for model in chosen}
    failed = [name for name, ok in results.items() if not ok]
    print(
        f"\n{len(results) - len(failed)} of {len(results)} models as expected"
        + (f"; not: {failed}" if failed else "")
    )
    return 1 if failed else 0
