"""`[tool.npu-migrate]` in pyproject.toml: which rules run (select, extend-select, ignore, by code
or prefix, and per-file ignores by gitignore-style pattern), what is excluded, extra rule files,
whether apply makes unsafe fixes, and the gate's fail level. Which file's configuration applies
where: cli/selection.py."""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG
from typing import TYPE_CHECKING, Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the tomli backport, as pyproject's dependencies say
    import tomli as tomllib

from npu_migrate.report.gate import FailOn

if TYPE_CHECKING:
    import pathspec


class ConfigError(Exception):
    """The configuration cannot be read; the message says why, in a line."""


@dataclass(frozen=True)
class Settings:
    """The keys of [tool.npu-migrate], spelled there with dashes (extend-select, fail-on)."""

    select: list[str] | None = None  # only these codes or prefixes (default: every rule)
    extend_select: list[str] = field(default_factory=list)  # more codes or prefixes to select
    ignore: list[str] = field(default_factory=list)  # codes or prefixes never run
    # pattern (gitignore-style, from the config's folder) -> codes or prefixes not run in its files
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    exclude: list[str] = field(default_factory=list)  # patterns of files never read
    rules: list[Path] = field(default_factory=list)  # extra rule files or folders
    unsafe: bool = False  # apply also makes unsafe fixes
    fail_on: FailOn = FailOn.warning  # the least severe finding that fails the gate

    @classmethod
    def of(cls, table: dict[str, Any]) -> Settings:
        """The settings of a TOML table, checked here rather than by a pydantic model: TOML's values
        come typed, and every run reads its configuration (a pre-commit hook's, on one file), where
        building the model's validator took about 40 ms of a 0.3 s run. Raises _Invalid."""
        values = {}
        for key, value in table.items():
            name = key.replace("-", "_")
            if name not in _CHECKS or "_" in key:
                raise _Invalid(key, "Extra inputs are not permitted")
            values[name] = _CHECKS[name](key, value)
        return cls(**values)


class _Invalid(Exception):
    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where}: {why}")


def _strings(where: str, value: object) -> list[str]:
    if not isinstance(value, list):
        raise _Invalid(where, "Input should be a valid list")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise _Invalid(f"{where}.{i}", "Input should be a valid string")
    return value


def _codes_by_pattern(where: str, value: object) -> dict[str, list[str]]:
    if not isinstance(value, dict):
        raise _Invalid(where, "Input should be a valid dictionary")
    return {pattern: _strings(f"{where}.{pattern}", codes) for pattern, codes in value.items()}


def _paths(where: str, value: object) -> list[Path]:
    return [Path(p) for p in _strings(where, value)]


def _boolean(where: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise _Invalid(where, "Input should be a valid boolean")
    return value


def _fail_level(where: str, value: object) -> FailOn:
    if value not in {level.value for level in FailOn}:
        levels = [f"'{level.value}'" for level in FailOn]
        raise _Invalid(where, f"Input should be {', '.join(levels[:-1])} or {levels[-1]}")
    return FailOn(value)


_CHECKS: dict[str, Callable[[str, object], Any]] = {  # Settings' fields, each with its check
    "select": _strings,
    "extend_select": _strings,
    "ignore": _strings,
    "per_file_ignores": _codes_by_pattern,
    "exclude": _strings,
    "rules": _paths,
    "unsafe": _boolean,
    "fail_on": _fail_level,
}


@dataclass(frozen=True)
class Config:
    settings: Settings
    root: Path  # the folder patterns and rule paths are relative to
    path: Path | None = None  # the pyproject.toml read, if any

    @property
    def selection(self) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
        """(select or None for every rule, ignore), as prefixes."""
        s = self.settings
        chosen = None if s.select is None else tuple(s.select) + tuple(s.extend_select)
        return chosen, tuple(s.ignore)

    def excluded(self, path: Path) -> bool:
        return bool(self.settings.exclude) and _spec(self.settings.exclude).match_file(self._relative(path))

    def ignored_in(self, path: Path) -> tuple[str, ...]:
        """The codes or prefixes per-file-ignores leaves out for this file."""
        relative = self._relative(path)
        codes: list[str] = []
        for pattern, ignored in self.settings.per_file_ignores.items():
            if _spec([pattern]).match_file(relative):
                codes += ignored
        return tuple(sorted(set(codes)))

    def rule_files(self) -> list[Path]:
        return [p if p.is_absolute() else self.root / p for p in self.settings.rules]

    def _relative(self, path: Path) -> str:
        try:  # as found, links not followed (a loop of them is a file's problem, reported as such)
            return path.absolute().relative_to(self.root.absolute()).as_posix()
        except ValueError:
            return path.as_posix()


def selected(code: str, select: tuple[str, ...] | None, ignore: tuple[str, ...]) -> bool:
    return (select is None or code.startswith(select)) and not code.startswith(ignore)


def load_config(explicit: Path | None, start: Path) -> Config:
    if explicit is not None:
        path: Path | None = explicit
        table = _table(explicit)
        if table is None and explicit.name == "pyproject.toml":
            raise ConfigError(f"{explicit} has no [tool.npu-migrate] table")
    else:
        path, table = _nearest(start)
    if path is None:
        return Config(Settings(), Path.cwd())
    try:
        return Config(Settings.of(table or {}), path.parent, path)
    except _Invalid as exc:
        raise ConfigError(f"{path}: [tool.npu-migrate] {exc}") from None


_OURS = re.compile(r"^[ \t]*\[[ \t]*tool[ \t]*\.[ \t]*[\"']?npu-migrate\b", re.MULTILINE)  # one line


def _table(path: Path, explicit: bool = True) -> dict | None:
    """The [tool.npu-migrate] table of a pyproject.toml, or a file of its own (npu-migrate.toml).
    A pyproject.toml found on the way up that does not parse is a vendored package's unless it
    names our table: it configures nothing (its own handler reports it as not read)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"no such config file: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        if not explicit:
            return None
        raise ConfigError(f"cannot read {path}: {exc}") from None
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        if not explicit and not _OURS.search(text):
            return None
        why = exc if isinstance(exc, tomllib.TOMLDecodeError) else "nested too deeply"
        raise ConfigError(f"cannot read {path}: {why}") from None
    if path.name != "pyproject.toml":
        return data
    tools = data.get("tool")
    table = tools.get("npu-migrate") if isinstance(tools, dict) else None  # `tool = 5`: not ours
    if table is not None and not isinstance(table, dict):
        raise ConfigError(f"{path}: tool.npu-migrate must be a table, not {_toml_type(table)}")
    return table


def _toml_type(value: object) -> str:
    """What a TOML value is, in TOML's words."""
    names = {bool: "a boolean", int: "an integer", float: "a float", str: "a string", list: "an array"}
    return next((name for kind, name in names.items() if isinstance(value, kind)), "a date or time")


def _nearest(start: Path) -> tuple[Path | None, dict | None]:
    """The nearest pyproject.toml with our table, from `start` up, and the table."""
    folder = start.resolve()
    folder = folder if folder.is_dir() else folder.parent
    for candidate in (folder, *folder.parents):
        pyproject = candidate / "pyproject.toml"
        try:
            stat = pyproject.stat()
        except OSError:
            continue
        table = _found_table(pyproject, stat.st_mtime_ns, stat.st_size) if S_ISREG(stat.st_mode) else None
        if table is not None:
            return pyproject, table
    return None, None


@functools.lru_cache(maxsize=64)
def _found_table(pyproject: Path, mtime_ns: int, size: int) -> dict | None:
    """Our table of a pyproject.toml found on the way up, read once per version of the file (a
    run looks up from each folder of a tree, and they share their parents')."""
    return _table(pyproject, explicit=False)


def _spec(patterns: list[str]) -> pathspec.PathSpec:
    import pathspec  # only a configuration with patterns needs it

    return pathspec.PathSpec.from_lines("gitwildmatch", patterns)
