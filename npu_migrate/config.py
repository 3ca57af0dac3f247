"""`[tool.npu-migrate]` in pyproject.toml: which rules run (select, extend-select, ignore, by code
or prefix, and per-file ignores by gitignore-style pattern), what is excluded, extra rule files,
whether apply makes unsafe fixes, and the gate's fail level. Which file's configuration applies
where: cli/selection.py."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pathspec
from pydantic import BaseModel, ConfigDict, Field, ValidationError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the tomli backport, as pyproject's dependencies say
    import tomli as tomllib

from npu_migrate.report.gate import FailOn


class ConfigError(Exception):
    """The configuration cannot be read; the message says why, in a line."""


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=lambda name: name.replace("_", "-"))

    select: list[str] | None = Field(None, description="Only these codes or prefixes (default: every rule).")
    extend_select: list[str] = Field(default_factory=list, description="More codes or prefixes to select.")
    ignore: list[str] = Field(default_factory=list, description="Codes or prefixes never run.")
    per_file_ignores: dict[str, list[str]] = Field(
        default_factory=dict, description="Pattern (gitignore-style, from the config's folder) -> codes."
    )
    exclude: list[str] = Field(default_factory=list, description="Patterns of files never read.")
    rules: list[Path] = Field(default_factory=list, description="Extra rule files or folders.")
    unsafe: bool = Field(False, description="apply also makes unsafe fixes.")
    fail_on: FailOn = Field(
        FailOn.warning, description="The least severe finding that fails the gate: error, warning or info."
    )


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
    path = explicit or _nearest(start)
    if path is None:
        return Config(Settings.model_validate({}), Path.cwd())
    table = _table(path)
    if table is None:
        if explicit is not None and path.name == "pyproject.toml":
            raise ConfigError(f"{path} has no [tool.npu-migrate] table")
        table = {}
    try:
        return Config(Settings.model_validate(table), path.parent, path)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "table"
        raise ConfigError(f"{path}: [tool.npu-migrate] {where}: {first['msg']}") from None


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
    table = data.get("tool", {}).get("npu-migrate")
    return table if isinstance(table, dict) else None


def _nearest(start: Path) -> Path | None:
    folder = start.resolve()
    folder = folder if folder.is_dir() else folder.parent
    for candidate in (folder, *folder.parents):
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file() and _table(pyproject, explicit=False) is not None:
            return pyproject
    return None


def _spec(patterns: list[str]) -> pathspec.PathSpec:
    return pathspec.PathSpec.from_lines("gitwildmatch", patterns)
