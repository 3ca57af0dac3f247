"""Which rules run for which files: each file's nearest `[tool.npu-migrate]` (a nested project's
own, or `--config` for every file), with the command line laid over it: --select replaces the
config's select, --extend-select and --ignore add to its lists, --rules adds rule files. The
config nearest the first path also gives the run's fail level and unsafe fixes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer

from npu_migrate.cli import common
from npu_migrate.config import Config, ConfigError, load_config
from npu_migrate.model import Applicability, FileOutcome, SourceFile
from npu_migrate.pipeline import RuleSource
from npu_migrate.report.gate import FailOn

Select = Annotated[
    list[str] | None,
    typer.Option(
        show_default=False,
        help="Run only these rule codes or prefixes (NPU1, NPU301), repeatable or comma-separated; "
        "replaces the config's select.",
    ),
]
ExtendSelect = Annotated[
    list[str] | None,
    typer.Option(show_default=False, help="Add these codes or prefixes to the selection."),
]
Ignore = Annotated[
    list[str] | None,
    typer.Option(
        show_default=False, help="Leave out these codes or prefixes (added to the config's ignore)."
    ),
]


@dataclass
class Selection:
    explicit: Path | None  # --config
    run_config: Config  # the one nearest the first path
    rules: tuple[Path, ...]  # --rules
    select: tuple[str, ...] | None  # --select
    extend_select: tuple[str, ...]
    ignore: tuple[str, ...]
    fail_on: FailOn
    _nearest: dict[Path, Config] = field(default_factory=dict)

    @property
    def extra_rules(self) -> list[Path]:
        return self.run_config.rule_files() + list(self.rules)

    def config_for(self, path: Path) -> Config:
        if self.explicit is not None:
            return self.run_config
        folder = path.absolute().parent
        if folder not in self._nearest:
            self._nearest[folder] = _load(None, folder)
            _check_config_selectors(self._nearest[folder], self.rules)
        return self._nearest[folder]

    def rule_source(self, config: Config, path: Path) -> RuleSource:
        chosen, ignored = config.selection
        if self.select:
            chosen = self.select
        if self.extend_select and chosen is not None:  # with no select, every rule runs already
            chosen += self.extend_select
        extra = config.rule_files() + list(self.rules)
        return RuleSource(extra, select=chosen, ignore=ignored + self.ignore + config.ignored_in(path))


def selection(
    paths: list[Path],
    config_path: Path | None,
    rules: list[Path] | None,
    select: list[str] | None,
    extend_select: list[str] | None,
    ignore: list[str] | None,
    fail_on: FailOn | None,
) -> Selection:
    run_config = _load(config_path, paths[0] if paths else Path.cwd())
    chosen = Selection(
        config_path,
        run_config,
        tuple(rules or []),
        _codes(select) if select else None,
        _codes(extend_select or []),
        _codes(ignore or []),
        fail_on or run_config.settings.fail_on,
    )
    given = {
        "--select": chosen.select or (),
        "--extend-select": chosen.extend_select,
        "--ignore": chosen.ignore,
    }
    _check_selectors(given, chosen.rules)
    _check_config_selectors(run_config, chosen.rules)
    return chosen


def run_selected(
    files: list[SourceFile],
    chosen: Selection,
    enabled: frozenset[Applicability],
    jobs: int | None,
    use_cache: bool = True,
) -> list[FileOutcome]:
    """The selected rules over the files no configuration excludes, in groups of files that
    share their rules (a nested project's, per-file ignores)."""
    kept = []
    groups: dict[tuple[tuple[Path, ...], tuple[str, ...] | None, tuple[str, ...]], list[SourceFile]] = {}
    for file in files:
        config = chosen.config_for(file.path)
        if config.excluded(file.path):
            continue
        source = chosen.rule_source(config, file.path)
        groups.setdefault((tuple(source.extra), source.select, source.ignore), []).append(file)
        kept.append(file)
    if not groups:  # no file: the rules are still checked
        groups[(tuple(chosen.extra_rules), None, ())] = []
    outcomes: dict[int, FileOutcome] = {}
    for (extra, select, ignore), members in groups.items():
        source = RuleSource(list(extra), select=select, ignore=ignore)
        for member, outcome in zip(
            members, common.run(members, source, enabled, jobs, use_cache), strict=True
        ):
            outcomes[id(member)] = outcome  # (a file its handler skipped comes back a new SourceFile)
    return [outcomes[id(f)] for f in kept]


def _load(explicit: Path | None, start: Path) -> Config:
    try:
        return load_config(explicit, start)
    except ConfigError as exc:
        common.fail(str(exc))


def _check_config_selectors(config: Config, rules: tuple[Path, ...]) -> None:
    """A configuration's selectors, each checked as the command line's are."""
    if config.path is None:
        return
    settings, where = config.settings, f"{config.path} [tool.npu-migrate]"
    given = {
        f"{where} select": tuple(settings.select or ()),
        f"{where} extend-select": tuple(settings.extend_select),
        f"{where} ignore": tuple(settings.ignore),
    }
    given |= {
        f"{where} per-file-ignores {pattern!r}": tuple(codes)
        for pattern, codes in settings.per_file_ignores.items()
    }
    _check_selectors(given, rules, config)


def _check_selectors(
    given: dict[str, tuple[str, ...]], rules: tuple[Path, ...], config: Config | None = None
) -> None:
    """Fail, in a line, on a code or prefix no rule of the run has: a typo (`NPU1O1`, `NPU999`)
    would otherwise select nothing, or ignore nothing, and the gate would pass on any code.
    Read only where something is selected: the codes come from the rule files, not the rules."""
    if not any(given.values()):
        return
    from npu_migrate.rules.files import RuleError, builtin_rules_dir, opt_in_sets, rule_codes

    extra = list(rules) + (config.rule_files() if config is not None else [])
    try:
        known = rule_codes([builtin_rules_dir(), *extra])
    except RuleError as exc:
        common.fail(str(exc))
    for where, codes in given.items():
        for code in codes:
            if any(known_code.startswith(code) for known_code in known):
                continue
            opt_in = next((name for name, path in opt_in_sets().items() if code in rule_codes([path])), None)
            hint = (
                f"; it is in the opt-in rule set {opt_in} (--rules {opt_in})"
                if opt_in
                else _closest(code, known)
            )
            common.fail(f"{where}: {code} is no rule's code nor the start of one{hint}")


def _closest(code: str, known: set[str]) -> str:
    """A hint: the code with letters that look like digits read as digits (`NPU1O1`), else the
    nearest code, else the catalog's range."""
    import difflib

    letters = len(code) - len(code.lstrip("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"))
    digits = code[letters:].translate(str.maketrans("OoIlS", "00115"))
    read = code[:letters].upper() + digits
    if read != code and any(known_code.startswith(read) for known_code in known):
        return f"; did you mean {read}?"
    close = difflib.get_close_matches(code.upper(), sorted(known), n=1, cutoff=0.7)
    return f"; did you mean {close[0]}?" if close else f"; codes run from {min(known)} to {max(known)}"


def _codes(given: list[str]) -> tuple[str, ...]:
    """Codes or prefixes, given repeatedly or comma-separated."""
    return tuple(code.strip().upper() for item in given for code in item.split(",") if code.strip())
