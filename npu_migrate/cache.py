"""A content-addressed cache of per-file scan/apply results, so an unchanged file is not parsed again.

The key is the sha256 of the caller's salt (tool version, rule-set hash, options) and the file's bytes:
a change to any of them is a different key, so entries never need invalidating, only (rarely) pruning.
The cache is an optimisation and nothing more: a missing, corrupt or unwritable entry is a miss, never
an error. Entries are written to a temporary file beside their final place and renamed over it
(``os.replace`` is atomic), so concurrent runs never read a half-written entry and need no locks."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

import platformdirs

# Bump when the entry format changes: old entries then simply stop being found.
LAYOUT = "v1"
# Each entry starts with the sha256 of its value: writes are not fsynced, so a crash can leave an empty
# or garbled file behind, and that must read as a miss rather than as a value the caller fails to parse.
_DIGEST = hashlib.sha256().digest_size
_HEX = frozenset("0123456789abcdef")


def default_directory() -> Path:
    """The per-user cache folder (e.g. ~/.cache/npu-migrate on Linux, which XDG_CACHE_HOME moves)."""
    return Path(platformdirs.user_cache_dir("npu-migrate"))


class ResultCache:
    """Opaque bytes stored under ``<directory>/v1/<key[:2]>/<key>``."""

    def __init__(self, directory: Path | None = None, *, salt: str) -> None:
        self.directory = Path(directory) if directory is not None else default_directory()
        self._root = self.directory / LAYOUT
        # A fixed-length digest of the salt, not the salt itself, goes in front of the data, so that no
        # (salt, data) pair can be shifted into another one with the same concatenation.
        self._salted = hashlib.sha256(hashlib.sha256(salt.encode()).digest())

    def key(self, data: bytes) -> str:
        """The key of ``data`` under this cache's salt: sha256 hex of salt + data."""
        hasher = self._salted.copy()
        hasher.update(data)
        return hasher.hexdigest()

    def get(self, key: str) -> bytes | None:
        """The value stored under ``key``, or None when there is none or it cannot be read intact."""
        try:
            blob = self._path(key).read_bytes()
        except OSError:  # missing, a folder in its place, no permission, I/O error: all a miss
            return None
        digest, value = blob[:_DIGEST], blob[_DIGEST:]
        if len(digest) != _DIGEST or hashlib.sha256(value).digest() != digest:
            return None
        return value

    def put(self, key: str, value: bytes) -> None:
        """Store ``value`` under ``key``; does nothing (silently) when the cache folder is not writable."""
        path = self._path(key)
        blob = hashlib.sha256(value).digest() + value
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(prefix=f".{key}.", suffix=".tmp", dir=path.parent)
        except OSError:
            return
        try:
            with os.fdopen(fd, "wb") as stream:
                stream.write(blob)
            # Two runs storing the same key both succeed: the last rename wins, and both wrote the same value.
            os.replace(temporary, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temporary)

    def _path(self, key: str) -> Path:
        # Keys come from key(); anything else is a caller's bug, and must not name a path outside the cache.
        if len(key) != 64 or not _HEX.issuperset(key):
            raise ValueError(f"not a cache key: {key!r}")
        return self._root / key[:2] / key
