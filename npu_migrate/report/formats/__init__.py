"""Output formats, one module each behind this registry: a format is a `write(console,
outcomes, summary)` function. Nothing else in the tool knows about formats."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console

from npu_migrate.model import FileOutcome
from npu_migrate.report.formats import json, text
from npu_migrate.report.summary import Summary

Writer = Callable[[Console, list[FileOutcome], Summary], None]

FORMATS: dict[str, Writer] = {
    "text": text.write,
    "json": json.write,
}
