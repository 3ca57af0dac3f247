"""Unified diffs of rewritten files, decoded the way Python reads them."""

from __future__ import annotations

import difflib
import io
import tokenize

from npu_migrate.model import FileOutcome


def _lines(data: bytes) -> list[str]:
    """Source bytes as lines, decoded the way Python would (coding line, BOM)."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding, errors="replace").splitlines(keepends=True)


def unified_diff(outcome: FileOutcome) -> str:
    old = _lines(outcome.file.data or b"")
    new = _lines(outcome.result.new_source or b"")
    name = outcome.file.display
    sep = "" if name.startswith("/") else "/"
    return "".join(difflib.unified_diff(old, new, f"a{sep}{name}", f"b{sep}{name}"))
