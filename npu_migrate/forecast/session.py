"""A forecast around one `run --emulate`: every process the run starts records into one folder;
once the run is over, the recordings become the forecast and its reports."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from npu_migrate.forecast import FOLDER_VARIABLE, ROOT_VARIABLE, analysis, kernels, report


@dataclass(frozen=True)
class Request:
    """What the user asked of the forecast."""

    table: kernels.KernelTable
    chip: str
    card_gib: float
    json_path: Path | None
    html_path: Path | None


@contextlib.contextmanager
def recorded(request: Request, root: Path) -> Iterator[None]:
    """Record the run started inside, then report its forecast on stderr and in the files asked."""
    with tempfile.TemporaryDirectory(prefix="npu-migrate-forecast-") as folder:
        os.environ[FOLDER_VARIABLE], os.environ[ROOT_VARIABLE] = folder, str(root.resolve())
        try:
            yield
        finally:
            recorder = sys.modules.get("npu_migrate.forecast.recorder")  # loaded where this process ran
            if recorder is not None:  # the script itself (a launcher's children leave their own)
                recorder.finish()
            del os.environ[FOLDER_VARIABLE], os.environ[ROOT_VARIABLE]
            result = analysis.forecast(
                analysis.read_recordings(Path(folder)), request.table, request.chip, request.card_gib
            )
            print(report.text(result), file=sys.stderr)
            if request.json_path is not None:
                report.write_json(result, request.json_path)
            if request.html_path is not None:
                report.write_html(result, request.html_path)
