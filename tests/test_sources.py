"""The pinned sources the tests read are what their archives hold: a cached tree someone changed,
emptied or half deleted is unpacked again from the archive, which is checked against its pin."""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import pytest

from tests import sources


@pytest.fixture
def release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> sources.Release:
    archive = tmp_path / "published" / "pkg-1.0-py3-none-any.whl"
    archive.parent.mkdir()
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as wheel:
        wheel.writestr("pkg/__init__.py", "x = 1\n")
        wheel.writestr("pkg/model.py", "import torch\nx.cuda()\n")
    archive.write_bytes(data.getvalue())
    monkeypatch.setattr(sources, "CACHE", tmp_path / "cache")
    sources.fetch.cache_clear()
    yield sources.Release(archive.as_uri(), hashlib.sha256(data.getvalue()).hexdigest(), "pkg")
    sources.fetch.cache_clear()


def fetched_again(release: sources.Release) -> Path:
    sources.fetch.cache_clear()  # a new test process
    return sources.fetch(release)


def test_a_tampered_or_emptied_cached_tree_is_unpacked_again(release: sources.Release) -> None:
    package = sources.fetch(release)
    assert (package / "model.py").read_text() == "import torch\nx.cuda()\n"
    (package / "model.py").write_text("import torch\n")  # the CUDA call a test looks for, gone
    assert (fetched_again(release) / "model.py").read_text() == "import torch\nx.cuda()\n"
    for file in package.iterdir():
        file.unlink()
    assert sorted(p.name for p in fetched_again(release).iterdir()) == ["__init__.py", "model.py"]
    (package / "extra.py").write_text("y = 2\n")
    assert not (fetched_again(release) / "extra.py").exists()


def test_a_tampered_cached_archive_is_fetched_again(release: sources.Release) -> None:
    sources.fetch(release)
    kept = next(sources.CACHE.glob("*.archive"))
    kept.write_bytes(b"not the archive")
    (sources.fetch(release).parent / "pkg" / "model.py").write_text("changed\n")
    assert (fetched_again(release) / "model.py").read_text() == "import torch\nx.cuda()\n"
    assert hashlib.sha256(kept.read_bytes()).hexdigest() == release.sha256
