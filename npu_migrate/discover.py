"""Finding the files to look at: the files npu-migrate reads (Python, notebooks, scripts,
dependency files, configs; see file_kind) under the given paths, honouring .gitignore, each read
once (or skipped with a reason)."""

from __future__ import annotations

import errno
import functools
import os
import re
from pathlib import Path, PurePath
from stat import S_ISREG
from typing import TYPE_CHECKING

from npu_migrate.git import tracked
from npu_migrate.model import NO_MODULE, ModulePath, SourceFile

if TYPE_CHECKING:
    import pathspec

SKIP_DIRS = {
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    "__pycache__",
    "node_modules",
    ".tox",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
}
DEFAULT_MAX_BYTES = 4 * 1024 * 1024


IGNORED = "matched by .gitignore and not tracked by git"
IGNORED_FOLDER = f"a folder {IGNORED}"  # counted as one: what it holds is not walked


class _Ignores:
    """Git's ignore rules for a walk: `.git/info/exclude` and every `.gitignore` from the
    repository's root down, each applying below its own folder, the deeper ones last (so a
    nested `!pattern` re-includes what a parent ignored). As in git, a pattern never hides a file
    git tracks, nor a folder that holds one: where git answers, it says which files it tracks."""

    def __init__(self, top: Path) -> None:
        self._top = top.resolve()
        self._specs: list[tuple[Path, pathspec.GitIgnoreSpec]] = []
        repo = next((p for p in [self._top, *self._top.parents] if (p / ".git").exists()), None)
        if repo is None:
            return
        self._add(repo, repo / ".git" / "info" / "exclude")
        for folder in reversed(self._top.parents):  # the folders above the walk, root first
            if folder.is_relative_to(repo):
                self._add(folder, folder / ".gitignore")

    def _add(self, base: Path, file: Path) -> None:
        if file.is_file():
            import pathspec  # only where a .gitignore is found: a run that meets none never needs it

            lines = file.read_text(encoding="utf-8", errors="replace").splitlines()
            self._specs.append((base, pathspec.GitIgnoreSpec.from_lines(lines)))

    def enter(self, rel: Path) -> None:
        """A folder of the walk (relative to its top), entered before the folders below it."""
        self._add(self._top / rel, self._top / rel / ".gitignore")

    def ignored(self, rel: Path, is_dir: bool) -> bool:
        path = self._top / rel
        verdict = None
        for base, spec in self._specs:
            if path.is_relative_to(base):
                result = spec.check_file(path.relative_to(base).as_posix() + ("/" if is_dir else "")).include
                verdict = result if result is not None else verdict
        if not verdict:
            return False
        tracked_files, holding = self._tracked
        return path not in (holding if is_dir else tracked_files)

    @functools.cached_property
    def _tracked(self) -> tuple[frozenset[Path], frozenset[Path]]:
        """The files git tracks under the walk, and the folders that hold one: asked of git
        only once a pattern matches (a walk nothing matches in runs no git)."""
        answer = tracked(self._top)
        if answer is None:
            return frozenset(), frozenset()
        git_top, names = answer
        files = frozenset(git_top.resolve() / name for name in names)
        return files, frozenset(folder for path in files for folder in path.parents)


def printable(name: str) -> str:
    """A file name as reports can show it on one line: undecodable bytes and control characters
    (a newline, a terminal escape) escaped."""
    if name.isprintable():  # the common case, without a pass per character
        return name
    name = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in name)


def from_stdin(name: str, data: bytes) -> SourceFile:
    """A file an editor or a hook pipes in, named as it will be in reports (`--stdin-filename`)."""
    path = Path(name)
    module = module_of(path) if path.exists() else NO_MODULE
    return SourceFile(path, printable(name), data=data, module=module)


def _load(path: Path, display: str, root: Path | None, max_bytes: int) -> SourceFile:
    """One file, read once. Only regular files are read (a FIFO would block forever); a link
    found in a tree is left to its target, which is migrated where it lives, so that the link
    stays a link; a link named on the command line is followed."""
    display = printable(display)
    try:
        if path.is_symlink():
            target = path.resolve(strict=True)
            if root is not None:
                inside = target.is_relative_to(root.resolve())
                return SourceFile(
                    path,
                    display,
                    skipped=f"a link to {printable(str(target))}"
                    + ("; migrated there, not through the link" if inside else ", outside the tree"),
                )
            path = target
        stat = path.stat()
        if not S_ISREG(stat.st_mode):
            return SourceFile(path, display, skipped="not a regular file")
        if stat.st_size > max_bytes:
            return SourceFile(path, display, skipped=f"larger than --max-size ({max_bytes:,} bytes)")
        data = path.read_bytes()
    except RuntimeError:  # a loop of links (Python before 3.13)
        return SourceFile(path, display, skipped="a loop of symbolic links")
    except OSError as exc:
        reason = "a loop of symbolic links" if exc.errno == errno.ELOOP else f"cannot read: {exc.strerror}"
        return SourceFile(path, display, skipped=reason)
    if b"\0" in data[:8192]:
        return SourceFile(path, display, skipped="binary file")
    return SourceFile(path, display, data=data, stat=stat, module=module_of(path))


def module_of(path: Path) -> ModulePath:
    """The module a file is, found from the `__init__.py` files of its folders."""
    package = package_of(path.parent)
    beside = cuda_member_beside(path) if path.suffix == ".py" else ""
    if not package:
        return ModulePath(cuda_member_beside=beside)
    if path.name == "__init__.py":
        return ModulePath(package, package)
    return ModulePath(f"{package}.{path.stem}" if path.stem.isidentifier() else "", package, beside)


# Module names of one member of a family of per-device implementations, their tests' names
# (`test_cuda.py`) read as the module they test.
_CUDA_MEMBER = frozenset({"cuda", "gpu"})
_OTHER_DEVICES = frozenset({"cpu", "mps", "xla", "tpu", "xpu", "hpu", "npu", "ipu", "mlu", "rocm", "hip"})


def cuda_member_beside(path: Path) -> str:
    """The modules beside `path` named for other devices, when `path` is named for CUDA
    (`accelerators/cuda.py` beside cpu.py and mps.py); "" otherwise."""
    if _device_word(path.stem) not in _CUDA_MEMBER:
        return ""
    return ", ".join(name for name in _python_files(path.parent) if _device_word(name[:-3]) in _OTHER_DEVICES)


def _device_word(stem: str) -> str:
    return stem.removeprefix("test_").removesuffix("_test")


def _python_files(folder: Path) -> list[str]:
    """Read for files named for CUDA only, so never cached: a folder may change between runs."""
    try:
        return sorted(e.name for e in os.scandir(folder) if e.name.endswith(".py") and e.is_file())
    except OSError:
        return []


@functools.cache
def package_of(folder: Path) -> str:
    """The dotted package a folder is (its parents that hold an `__init__.py`, as far up as
    they go), for resolving relative imports; "" when it is no package."""
    if not folder.name.isidentifier() or not (folder / "__init__.py").is_file():
        return ""
    parent = package_of(folder.parent) if folder.parent != folder else ""
    return f"{parent}.{folder.name}" if parent else folder.name


SUFFIXES = {
    ".py": "python",
    ".pyi": "python",
    ".ipynb": "notebook",
    ".sh": "shell",
    ".bash": "shell",
    ".json": "config",
    ".yaml": "config",
    ".yml": "config",
    ".cu": "native",
    ".cuh": "native",
    ".cpp": "native",
    ".cc": "native",
    ".cxx": "native",
}
NAMES = {"pyproject.toml": "pyproject", "setup.py": "setup.py", "setup.cfg": "setup.cfg"}
PATTERNS = (  # kinds by the shape of a name (lower case)
    (re.compile(r"(.*[-_.])?(requirements|constraints)([-_.].*)?\.(txt|in)"), "requirements"),
    (re.compile(r"(environment|conda|env)([-_.].*)?\.ya?ml"), "conda"),
    (re.compile(r"(dockerfile|containerfile)([-_.].*)?|.*\.dockerfile"), "dockerfile"),
    (re.compile(r"(gnu)?makefile|.*\.mk"), "makefile"),
)
SHELLS = (b"/sh", b"/bash", b"env sh", b"env bash")
CI_FOLDERS = {".github", ".circleci", ".gitlab"}


def file_kind(path: str, first_line: bytes) -> str | None:
    """What a file is to npu-migrate (its handler in the pipeline): by its name ("setup.py",
    "pyproject", "requirements", ...; a text file in a `requirements` folder too), its suffix
    ("python", "notebook", "shell") or else its shebang; None: nothing it reads."""
    parent, name = os.path.split(path)  # string operations: every file of a walk comes here
    kind = NAMES.get(name) or next((k for p, k in PATTERNS if p.fullmatch(name.lower())), None)
    if kind is None and os.path.basename(parent) == "requirements" and name.endswith((".txt", ".in")):
        kind = "requirements"
    kind = kind or SUFFIXES.get(os.path.splitext(name)[1])
    if kind == "config" and CI_FOLDERS & set(PurePath(path).parts):
        return None  # a CI workflow picks runners and images for the repository's own tests
    if kind is not None or not first_line.startswith(b"#!"):
        return kind
    if b"python" in first_line:
        return "python"
    return "shell" if any(shell in first_line for shell in SHELLS) else None


def kind_of(file: SourceFile) -> str:
    """A read file's kind (one named on the command line was taken for its kind, or its suffix)."""
    return file_kind(str(file.path), (file.data or b"")[:200].split(b"\n", 1)[0]) or "python"


def _readable(path: Path, in_tree: bool = False, max_bytes: int = DEFAULT_MAX_BYTES) -> bool:
    """A file npu-migrate reads (see file_kind); in a folder's walk, not a .pyi stub (it holds no
    code to run) nor a JSON or YAML file larger than the size limit (data: a dataset's annotations),
    and a file without a suffix only when its shebang says so."""
    kind = file_kind(str(path), b"")
    if kind == "config" and in_tree:  # a JSON file past the size limit is data, not a config
        try:
            return path.stat().st_size <= max_bytes
        except OSError:
            return True  # _load says why it cannot be read
    if kind is not None:
        return not (in_tree and path.suffix == ".pyi")
    if in_tree and path.suffix:
        return False
    try:
        if not S_ISREG(path.stat().st_mode):  # reading a FIFO's first line would wait forever
            return False
        with path.open("rb") as handle:
            first = handle.readline(200)
    except OSError:
        return False
    return file_kind(str(path), first) is not None


def discover(paths: list[Path], max_bytes: int = DEFAULT_MAX_BYTES) -> list[SourceFile]:
    """The files npu-migrate reads under each path (see _readable), each once, honouring git's
    ignore rules (see _Ignores) and never following directory symlinks. A file named directly is
    taken if it is of a kind npu-migrate reads."""
    found: list[SourceFile] = []
    seen: set[Path] = set()

    def add(path: Path, display: str, root: Path | None, real_folder: Path | None = None) -> None:
        """`real_folder`: the walk's folder resolved, which a file in it that is no link is in."""
        try:  # a link found in a tree is itself (its target is found where it lives)
            if root is not None and path.is_symlink():
                key = path.absolute()
            else:
                key = real_folder / path.name if real_folder is not None else path.resolve()
        except (OSError, RuntimeError):  # a loop of links: _load says so
            key = path.absolute()
        if key not in seen:
            seen.add(key)
            found.append(_load(path, display, root, max_bytes))

    for top in paths:
        if top.is_file():
            if _readable(top):
                add(top, str(top), None)
            else:
                unread = "not a kind of file npu-migrate reads"
                found.append(SourceFile(top, printable(str(top)), skipped=unread))
            continue
        if not top.is_dir():
            found.append(SourceFile(top, printable(str(top)), skipped="not a regular file"))
            continue
        ignores = _Ignores(top)

        def unreadable(error: OSError) -> None:  # os.walk would skip a folder it cannot list, silently
            where = str(error.filename)
            found.append(SourceFile(Path(where), printable(where), skipped=f"cannot read: {error.strerror}"))

        for folder, dirs, names in os.walk(top, onerror=unreadable):
            rel_here = Path(folder).relative_to(top)
            ignores.enter(rel_here)
            kept = []
            for name in sorted(d for d in dirs if d not in SKIP_DIRS):
                if not ignores.ignored(rel_here / name, is_dir=True):
                    kept.append(name)
                else:
                    shown = printable(str(top / (rel_here / name).as_posix())) + "/"
                    found.append(SourceFile(Path(folder) / name, shown, skipped=IGNORED_FOLDER))
            dirs[:] = kept
            real_folder = Path(folder).resolve()
            for name in sorted(names):
                path = Path(folder) / name
                if not _readable(path, True, max_bytes):
                    continue
                if ignores.ignored(rel_here / name, is_dir=False):
                    found.append(
                        SourceFile(path, printable(str(top / (rel_here / name).as_posix())), skipped=IGNORED)
                    )
                else:
                    add(path, str(top / (rel_here / name).as_posix()), top, real_folder)
    return found
