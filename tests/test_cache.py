"""The result cache: keys depend on salt and content, and nothing the disk does can fail a run."""

from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from npu_migrate.cache import ResultCache, default_directory

if TYPE_CHECKING:
    from multiprocessing.sharedctypes import Synchronized
    from multiprocessing.synchronize import Barrier

SALT = "npu-migrate 0.1.0|rules:abc123|unsafe=False"


def test_round_trip(tmp_path: Path) -> None:
    cache = ResultCache(tmp_path, salt=SALT)
    key = cache.key(b"import torch\nx.cuda()\n")
    assert cache.get(key) is None
    cache.put(key, b'{"findings": []}')
    assert cache.get(key) == b'{"findings": []}'
    assert (tmp_path / "v1" / key[:2] / key).is_file()
    assert ResultCache(tmp_path, salt=SALT).get(key) == b'{"findings": []}'  # survives the process
    cache.put(key, b"")  # an empty value is a value, not a miss
    assert cache.get(key) == b""


def test_key_is_sha256_hex_and_depends_on_salt_and_data(tmp_path: Path) -> None:
    cache = ResultCache(tmp_path, salt=SALT)
    key = cache.key(b"data")
    assert len(key) == 64 and int(key, 16) >= 0
    assert cache.key(b"data") == key
    assert cache.key(b"data ") != key
    other = ResultCache(tmp_path, salt=SALT + "|unsafe=True")
    assert other.key(b"data") != key
    cache.put(key, b"value")
    assert other.get(other.key(b"data")) is None
    # The salt and the data cannot be shifted into each other.
    assert ResultCache(tmp_path, salt="ab").key(b"c") != ResultCache(tmp_path, salt="a").key(b"bc")


def test_default_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert "npu-migrate" in default_directory().parts
    if sys.platform.startswith("linux"):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
        assert default_directory() == tmp_path / "npu-migrate"
        cache = ResultCache(salt=SALT)
        assert cache.directory == tmp_path / "npu-migrate"
        cache.put(cache.key(b"x"), b"y")
        assert cache.get(cache.key(b"x")) == b"y"


def test_a_folder_in_place_of_an_entry_is_a_miss_and_put_does_not_raise(tmp_path: Path) -> None:
    cache = ResultCache(tmp_path, salt=SALT)
    key = cache.key(b"x")
    (tmp_path / "v1" / key[:2] / key).mkdir(parents=True)
    assert cache.get(key) is None
    cache.put(key, b"value")  # cannot replace a folder: silently nothing
    assert cache.get(key) is None
    assert [p.name for p in (tmp_path / "v1" / key[:2]).iterdir()] == [key]  # no temporary left behind


@pytest.mark.parametrize("content", [b"", b"short", b"\0" * 32 + b"value"], ids=["empty", "short", "garbled"])
def test_a_damaged_entry_is_a_miss_and_is_overwritten(tmp_path: Path, content: bytes) -> None:
    cache = ResultCache(tmp_path, salt=SALT)
    key = cache.key(b"x")
    cache.put(key, b"value")
    path = tmp_path / "v1" / key[:2] / key
    path.write_bytes(content)  # what a crash between write and disk flush can leave
    assert cache.get(key) is None
    cache.put(key, b"value")
    assert cache.get(key) == b"value"


def test_a_truncated_entry_is_a_miss(tmp_path: Path) -> None:
    cache = ResultCache(tmp_path, salt=SALT)
    key = cache.key(b"x")
    cache.put(key, b"0123456789" * 100)
    path = tmp_path / "v1" / key[:2] / key
    path.write_bytes(path.read_bytes()[:-1])
    assert cache.get(key) is None


def test_a_cache_folder_that_cannot_be_created_is_ignored(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    cache = ResultCache(blocker / "cache", salt=SALT)
    key = cache.key(b"x")
    cache.put(key, b"value")
    assert cache.get(key) is None
    assert blocker.read_text() == "a file where the cache folder should be"


@pytest.mark.skipif(
    sys.platform == "win32" or os.geteuid() == 0, reason="needs POSIX permissions that bind (not root)"
)
def test_a_read_only_cache_folder_is_ignored_but_still_read(tmp_path: Path) -> None:
    cache = ResultCache(tmp_path, salt=SALT)
    old, new = cache.key(b"old"), cache.key(b"new")
    cache.put(old, b"stored before")
    folders = [tmp_path, tmp_path / "v1", tmp_path / "v1" / old[:2]]
    for folder in folders:
        folder.chmod(0o555)
    try:
        cache.put(new, b"value")
        cache.put(old, b"changed")
        assert cache.get(new) is None
        assert cache.get(old) == b"stored before"
    finally:
        for folder in folders:
            folder.chmod(0o755)


def test_a_failed_rename_keeps_the_old_entry_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a full disk, a permission change mid-run or (on Windows) a reader holding the file open does.
    cache = ResultCache(tmp_path, salt=SALT)
    key = cache.key(b"x")
    cache.put(key, b"old")

    def refuse(source: object, target: object) -> None:
        raise PermissionError(13, "Permission denied", str(target))

    monkeypatch.setattr(os, "replace", refuse)
    cache.put(key, b"new")
    assert cache.get(key) == b"old"
    assert [p.name for p in (tmp_path / "v1" / key[:2]).iterdir()] == [key]


def test_a_malformed_key_is_refused(tmp_path: Path) -> None:
    cache = ResultCache(tmp_path, salt=SALT)
    for key in ["../../etc/passwd", "", "A" * 64, cache.key(b"x")[:-1]]:
        with pytest.raises(ValueError):
            cache.get(key)
        with pytest.raises(ValueError):
            cache.put(key, b"x")


def _value(writer: int) -> bytes:
    # Large enough that a non-atomic write would be seen half done, different per writer so that a mix
    # of two writes shows.
    return bytes([65 + writer]) * 300_000


def _write_many(directory: str, key: str, writer: int, start: Barrier) -> None:
    cache = ResultCache(Path(directory), salt=SALT)
    start.wait()
    for _ in range(40):
        cache.put(key, _value(writer))


def _read_many(directory: str, key: str, writers: int, start: Barrier, bad: Synchronized[int]) -> None:
    cache = ResultCache(Path(directory), salt=SALT)
    valid = {_value(w) for w in range(writers)}
    start.wait()
    for _ in range(400):
        value = cache.get(key)
        # The entry exists before the writers start, so an atomic replace never lets a reader miss it.
        if value not in valid:
            bad.value += 1


def test_concurrent_writers_of_one_key_leave_a_valid_entry(tmp_path: Path) -> None:
    writers = 4
    context = multiprocessing.get_context("spawn")
    cache = ResultCache(tmp_path, salt=SALT)
    key = cache.key(b"the same file in every process")
    cache.put(key, _value(0))
    start = context.Barrier(writers + 1)
    bad = context.Value("i", 0)
    processes = [
        context.Process(target=_write_many, args=(str(tmp_path), key, w, start)) for w in range(writers)
    ]
    processes.append(context.Process(target=_read_many, args=(str(tmp_path), key, writers, start, bad)))
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
    assert [p.exitcode for p in processes] == [0] * len(processes)
    if sys.platform != "win32":  # Windows refuses to replace a file a reader holds open: a miss there
        assert bad.value == 0
    assert cache.get(key) in {_value(w) for w in range(writers)}
    assert [p.name for p in (tmp_path / "v1" / key[:2]).iterdir()] == [key]  # no temporaries left


# ------------------------------------------------------------------ the cache in a run


def _scan_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "train.py").write_text("import torch\nx.cuda()\ntorch.cuda.synchronize()\n")
    (tree / "plain.py").write_text("print('no cuda here')\n")
    return tree


def test_a_warm_scan_reports_the_same_and_loads_no_rule(
    tmp_path: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    tree = _scan_tree(tmp_path)
    cold = cli("scan", tree, "--format", "json")
    import npu_migrate.rules.load as load

    def no_rules(*args: object, **kwargs: object) -> None:
        raise AssertionError("a warm scan loaded the rules")

    monkeypatch.setattr(load, "load_rules", no_rules)
    warm = cli("scan", tree, "--format", "json")
    assert (warm.exit_code, warm.stdout) == (cold.exit_code, cold.stdout)
    assert '"NPU103"' in cold.stdout
    with pytest.raises(AssertionError, match="loaded the rules"):
        cli("scan", tree, "--format", "json", "--no-cache")


def test_a_changed_file_or_rule_file_is_looked_at_again(
    tmp_path: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    tree = _scan_tree(tmp_path)
    cli("scan", tree)
    (tree / "plain.py").write_text("import torch\ntorch.cuda.empty_cache()\n")
    assert "plain.py:2:1" in cli("scan", tree).stdout
    house = tmp_path / "house.yaml"
    rule = (
        "category: house\ncodes: HOU1xx\ndescription: d\nrules:\n"
        "  - {code: HOU101, name: house-print, summary: s, why: w, message: 'house {match}',\n"
        "     applicability: manual, severity: info, match: {name: [builtins.print]},\n"
        '     examples: [{flagged: "import builtins\\nbuiltins.print(1)\\n"}]}\n'
    )
    house.write_text(rule)
    assert "HOU101" not in cli("scan", tree, "--rules", house).stdout
    house.write_text(rule.replace("builtins.print]", "torch.cuda.empty_cache]"))
    assert "HOU101" in cli("scan", tree, "--rules", house).stdout


def test_a_corrupt_entry_is_looked_at_again(tmp_path: Path, cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    tree = _scan_tree(tmp_path)
    cold = cli("scan", tree, "--format", "json").stdout
    for entry in (tmp_path / "cache").rglob("v1/*/*"):
        entry.write_bytes(entry.read_bytes()[:-5])
    assert cli("scan", tree, "--format", "json").stdout == cold
