"""Writing results without ever leaving a half-written file or tree behind, and without ever
replacing what the user changed meanwhile."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_IMODE, S_ISDIR, S_ISLNK, S_ISREG

from npu_migrate.model import FileOutcome


class RefusedWrite(Exception):
    """A file this run must not replace; the message says why."""


def write_atomic(path: Path, data: bytes, read: bytes | None = None) -> str | None:
    """Replace `path` with `data` in one step, keeping its permission bits, its extended
    attributes (POSIX ACLs, SELinux labels among them) and, where this user may, its owner. With
    `read` (the bytes the run read): refuse when the file no longer holds them. Returns what
    could not be kept (hard links to the file keep the old content)."""
    if read is not None:
        try:
            current = path.read_bytes()
        except OSError as exc:
            raise RefusedWrite(f"cannot read it again before replacing it: {exc.strerror}") from None
        if current != read:
            raise RefusedWrite("it changed while npu-migrate ran; left as it is now")
    before = path.stat() if path.exists() else None
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".npu-migrate")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        if before is None:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # as open() would make it, not mkstemp's 0600
        else:
            os.chmod(tmp, S_IMODE(before.st_mode))
            if (before.st_uid, before.st_gid) != (os.getuid(), os.getgid()):
                with contextlib.suppress(PermissionError):
                    os.chown(tmp, before.st_uid, before.st_gid)
        lost = _attributes_copied(path, tmp) if before is not None else []
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    notes = [f"its extended attribute(s) {', '.join(lost)} could not be kept"] if lost else []
    if before is not None and before.st_nlink > 1:
        notes.append(f"had {before.st_nlink - 1} other hard link(s), which keep the old content")
    return "; ".join(notes) or None


def _attributes_copied(source: Path, target: str) -> list[str]:
    """Copy the extended attributes of source onto target; the names that could not be set
    (a `trusted.` one without the privilege; none where the file system has none)."""
    try:
        names = os.listxattr(source)
    except OSError:
        return []
    lost = []
    for name in names:
        try:
            os.setxattr(target, name, os.getxattr(source, name))
        except OSError:
            lost.append(name)
    return lost


def write_output(path: Path, data: bytes) -> None:
    """A report, baseline or change list written as a shell redirect writes it: into what is not
    a regular file (/dev/stdout, a terminal, a FIFO), which is never replaced; through a link, to
    the file it names; otherwise atomically (see write_atomic)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not S_ISREG(mode):
        with path.open("wb") as out:
            out.write(data)
        return
    write_atomic(path.resolve() if path.is_symlink() else path, data)


def copy_tree(source: Path, destination: Path) -> Path:
    """Copy `source` into a temporary sibling of `destination`; the caller renames it into
    place when done, so an interrupted run never leaves a half-migrated tree at `destination`."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(
        tempfile.mkdtemp(dir=destination.parent, prefix=f".{destination.name}.", suffix=".partial")
    )
    try:
        shutil.copytree(source, staging, symlinks=True, dirs_exist_ok=True, ignore=_special_files)
        _retarget_links(source, staging)
    except shutil.Error as exc:  # every file copytree could not copy: the first is named
        shutil.rmtree(staging, ignore_errors=True)
        first, _, why = exc.args[0][0]
        raise RefusedWrite(f"cannot copy {first}: {why}") from None
    except OSError as exc:  # named by the original's path, not the staging folder's
        shutil.rmtree(staging, ignore_errors=True)
        name = Path(exc.filename) if exc.filename else None
        named = source / name.relative_to(staging) if name and name.is_relative_to(staging) else name
        raise RefusedWrite(f"cannot copy {named or source}: {exc.strerror or exc}") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return staging


def _retarget_links(source: Path, copy: Path) -> None:
    """A link in the copy that names a path inside the original tree by its absolute path would
    lead back to the unmigrated original: it is made to lead to the same place in the copy."""
    root = source.resolve()
    for folder, dirs, names in os.walk(copy):
        for name in dirs + names:
            link = Path(folder) / name
            if not link.is_symlink() or not os.path.isabs(target := os.readlink(link)):
                continue
            if Path(target).resolve().is_relative_to(root):
                place = copy / Path(target).resolve().relative_to(root)
                link.unlink()
                link.symlink_to(os.path.relpath(place, link.parent))


def _special_files(folder: str, names: list[str]) -> set[str]:
    """FIFOs, sockets and devices are not copied (reading a FIFO blocks forever)."""
    special = set()
    for name in names:
        mode = os.lstat(os.path.join(folder, name)).st_mode
        if not (S_ISDIR(mode) or S_ISREG(mode) or S_ISLNK(mode)):
            special.add(name)
    return special


@dataclass
class Written:
    """What a run wrote, and what it did not write and why (by file display name)."""

    written: list[FileOutcome] = field(default_factory=list)
    not_written: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)


def write_outcomes(outcomes: list[FileOutcome], root: Path | None, out_dir: Path | None) -> Written:
    """Rewritten files in place, each on its own (a file that cannot be written, or that changed
    meanwhile, is left alone and the others still go); or (with `out_dir`) into a staged copy of
    the folder `root`, renamed into place only when every file is written."""
    done = Written()
    changed = [o for o in outcomes if o.result.new_source is not None]
    if out_dir is None:
        for outcome in changed:
            _write_one(outcome, outcome.file.path, done)
        return done
    assert root is not None
    staging = copy_tree(root, out_dir)
    try:
        for outcome in changed:
            _write_one(outcome, staging / outcome.file.path.relative_to(root), done)
        if done.not_written:
            raise RefusedWrite("; ".join(f"{name}: {why}" for name, why in done.not_written.items()))
        if out_dir.exists():
            out_dir.rmdir()  # the caller checked it is empty
        staging.rename(out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return done


def _write_one(outcome: FileOutcome, path: Path, done: Written) -> None:
    assert outcome.result.new_source is not None
    name = outcome.file.display
    try:
        note = write_atomic(path, outcome.result.new_source, read=outcome.file.data)
    except RefusedWrite as exc:
        done.not_written[name] = str(exc)
    except OSError as exc:
        done.not_written[name] = f"cannot write: {exc.strerror or exc}"
    else:
        done.written.append(outcome)
        if note:
            done.notes[name] = note
