"""Writing results without ever leaving a half-written file or tree behind."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from npu_migrate.model import FileOutcome


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` in one step, keeping its permission bits."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".npu-migrate")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        if path.exists():
            shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def copy_tree(source: Path, destination: Path) -> Path:
    """Copy `source` into a temporary sibling of `destination`; the caller renames it into
    place when done, so an interrupted run never leaves a half-migrated tree at `destination`."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(
        tempfile.mkdtemp(dir=destination.parent, prefix=f".{destination.name}.", suffix=".partial")
    )
    shutil.copytree(source, staging, symlinks=True, dirs_exist_ok=True)
    return staging


def write_outcomes(outcomes: list[FileOutcome], root: Path | None, out_dir: Path | None) -> None:
    """Rewritten files in place, or (with `out_dir`) into a staged copy of the folder `root`
    that is renamed into place only when complete."""
    if out_dir is None:
        for outcome in outcomes:
            if outcome.result.new_source is not None:
                write_atomic(outcome.file.path, outcome.result.new_source)
        return
    assert root is not None
    staging = copy_tree(root, out_dir)
    for outcome in outcomes:
        if outcome.result.new_source is not None:
            write_atomic(staging / outcome.file.path.relative_to(root), outcome.result.new_source)
    if out_dir.exists():
        out_dir.rmdir()  # the caller checked it is empty
    staging.rename(out_dir)
