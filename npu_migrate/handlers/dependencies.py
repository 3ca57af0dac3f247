"""Dependency files as the `package` and `package_index` rules see them: each requirement (its
package's name, its version) and each index, link or channel a file installs from, found by the
file's own grammar (PEP 508 requirements via `packaging`, TOML, Python's `ast`, YAML) and located
to the byte, so that a fix edits only the requirement it is about. Requirements files may gain a
line (the torch_npu pin beside torch); the other formats are reported with the line to add."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace

import yaml
from packaging.requirements import InvalidRequirement, Requirement

from npu_migrate.engine.index import RuleIndex
from npu_migrate.engine.kinds.dependency import normalized
from npu_migrate.engine.regions import byte_span, byte_starts
from npu_migrate.engine.sites import Site, match_sites, site_result
from npu_migrate.engine.suppressions import Suppressions
from npu_migrate.handlers.configs import LOADER, spelled
from npu_migrate.model import NO_MODULE, Applicability, FileResult, Hold, ModulePath

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

NOT_LINES = Hold(
    "not a requirements file",
    "npu-migrate adds lines to requirements files only; add to this file's dependencies by hand",
)
CONDA = Hold(
    "a conda environment", "torch_npu installs with pip; add to this environment's `pip:` list by hand"
)
AS_PYTHON = Hold(
    "a setup.py requirement",
    "npu-migrate edits setup.py as Python code only; change this requirement by hand",
)
ESCAPED = Hold("spelled with escapes", "the string is spelled with escapes: edit it by hand")
CONTINUED = Hold(
    "inside a continued line",
    "the line before ends in `\\`, so pip would read a line added here as part of it; add by hand",
)
HASHED = Hold(
    "hash-checking mode",
    "pip installs this file in hash-checking mode (`--hash`): hashes pin the exact wheels, so a "
    "requirement or index changed or added without its new hashes stops the install; edit by hand",
)
_HASHES = re.compile(r"(^|\s)--(hash|require-hashes)\b")
_PIP_COMMENT = re.compile(r"(?:^|(?<=\s))#")  # pip's: a `\\` after it does not continue the line
_PIP_OPTION = re.compile(r"(-i|--index-url|--extra-index-url|-f|--find-links)(\s*=\s*|\s+)(\S+)")
_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*")
_CONDA_SPEC = re.compile(r"\s*(?:([\w./-]+)::)?([A-Za-z0-9_][A-Za-z0-9_.-]*)\s*")
_EXACT = re.compile(r"===?\s*(\d+(?:\.\d+)*)(?:\+[\w.]+)?")


@dataclass(frozen=True)
class Found:
    """A requirement, an index or a channel, found at `start` in the file (by a handler of
    dependency files, or of scripts that install packages)."""

    start: int
    text: str
    kind: str = "requirement"  # "requirement", "conda" (a conda spec) or "index"
    held: Hold | None = None
    no_new_line: Hold | None = None  # why no line may be added before it, as its file's grammar sees it


def migrate_requirements(
    data: bytes, index: RuleIndex, enabled: frozenset[Applicability], where: ModulePath = NO_MODULE
) -> FileResult:
    """A pip requirements file: one requirement, option or link per line."""
    if (undecodable := _undecodable(data)) is not None:
        return undecodable
    return _migrate(data, list(_requirements_lines(data)), index, enabled, None)


def migrate_pyproject(
    data: bytes, index: RuleIndex, enabled: frozenset[Applicability], where: ModulePath = NO_MODULE
) -> FileResult:
    try:
        document = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return FileResult.undecodable(data, exc)
    except tomllib.TOMLDecodeError as exc:
        return FileResult(error=f"not TOML: {exc}")
    except RecursionError:
        return FileResult(error="nested too deeply to parse")
    return _migrate(data, _located(data, _pyproject_strings(document)), index, enabled, NOT_LINES)


def migrate_setup_py(
    data: bytes, index: RuleIndex, enabled: frozenset[Applicability], where: ModulePath = NO_MODULE
) -> FileResult:
    """setup.py's install, setup, test and extra requirements (literal lists, or names bound to
    them at the top level); its Python code is scanned as Python as well."""
    from npu_migrate.engine.source import migrate_source

    result = migrate_source(data, index, enabled, where)
    if result.error:
        return result
    found = [replace(entry, held=entry.held or AS_PYTHON) for entry in _setup_py_requirements(data)]
    packages = _migrate(data, found, index, enabled, NOT_LINES, Suppressions.of(data))
    result.findings = sorted(result.findings + packages.findings, key=lambda f: (f.line, f.column))
    result.suppressed += packages.suppressed
    used_here = set(result.unused_suppressions) - set(packages.unused_suppressions)
    result.unused_suppressions = [line for line in result.unused_suppressions if line not in used_here]
    return result


def migrate_setup_cfg(
    data: bytes, index: RuleIndex, enabled: frozenset[Applicability], where: ModulePath = NO_MODULE
) -> FileResult:
    if (undecodable := _undecodable(data)) is not None:
        return undecodable
    return _migrate(data, list(_setup_cfg_requirements(data)), index, enabled, NOT_LINES, Suppressions([]))


def _undecodable(data: bytes) -> FileResult | None:
    """The error of a file that is not UTF-8 (its offsets could not be trusted), else None."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return FileResult.undecodable(data, exc)
    return None


def migrate_conda(
    data: bytes, index: RuleIndex, enabled: frozenset[Applicability], where: ModulePath = NO_MODULE
) -> FileResult:
    """A conda environment file: its channels, its conda packages and its `pip:` requirements."""
    try:
        found = list(_conda_entries(data.decode("utf-8")))
    except UnicodeDecodeError as exc:
        return FileResult.undecodable(data, exc)
    except yaml.YAMLError as exc:
        return FileResult(error=f"not YAML: {str(exc).splitlines()[0]}")
    return _migrate(data, found, index, enabled, CONDA)


def _migrate(
    data: bytes,
    found: list[Found],
    index: RuleIndex,
    enabled: frozenset[Applicability],
    no_new_line: Hold | None,
    suppressions: Suppressions | None = None,
) -> FileResult:
    """The rules at the requirements found; suppression comments are `#` comments at the end of a
    line (setup.cfg's values take none: configparser reads them as part of the value)."""
    suppressions = suppressions or Suppressions.in_lines(data)
    sites = requirement_sites(found, no_new_line)
    matched = match_sites(data, sites, index, enabled, {"requirements"}, suppressions=suppressions)
    return site_result(matched, data, suppressions)


def requirement_sites(found: list[Found], no_new_line: Hold | None) -> list[Site]:
    """The sites of what a file requires, each knowing every package the file requires (a rule's
    `unless`) and why no line may be added beside it."""
    sites = [
        replace(site, no_new_line=no_new_line or entry.no_new_line)
        for entry in found
        for site in _sites(entry)
    ]
    packages = " ".join(sorted({s.facts["NAME"] for s in sites if s.kind == "requirement"}))
    return [replace(s, facts={**s.facts, "PACKAGES": packages}) for s in sites]


def _sites(entry: Found) -> Iterator[Site]:
    """A requirement's sites: the requirement (its name and pinned version as facts) and its
    version; an index's: its URL."""
    start, text = entry.start, entry.text
    if entry.kind == "index":
        yield Site("index", start, start + len(text.encode()), text, held=entry.held)
        return
    named = _CONDA_SPEC.match(text) if entry.kind == "conda" else _NAME.match(text)
    if named is None:
        return
    name = normalized(named[2] if entry.kind == "conda" else named[1])
    version = text[named.end() :].split(";")[0].split("#")[0].rstrip()
    if entry.kind == "requirement" and not version.startswith("@") and not _is_requirement(text):
        return
    facts = {"NAME": name}
    exact = _exact(version, conda=entry.kind == "conda")
    if exact:
        facts["VERSION"] = exact
    offset = start + len(text[: named.end()].encode())
    end = offset + len(version.encode())
    requirement = text.split("#")[0].rstrip() if entry.kind != "conda" else text.rstrip()
    yield Site("requirement", start, start + len(requirement.encode()), requirement, facts, held=entry.held)
    if version and not version.startswith("@"):
        yield Site("version", offset, end, version, facts, held=entry.held)


def _is_requirement(text: str) -> bool:
    try:
        Requirement(text.split(" #")[0].strip())
    except InvalidRequirement:
        return False
    return True


def _exact(version: str, conda: bool) -> str | None:
    """The release a version pins exactly (`==2.1.0`, `==2.1.0+cu121`, conda's `=2.1.0`)."""
    spec = version.strip()
    if conda and re.fullmatch(r"=?=?\d+\.\d+\.\d+(=\S+)?", spec):
        return spec.lstrip("=").split("=")[0]
    exact = _EXACT.fullmatch(spec)
    return exact[1] if exact and exact[1].count(".") >= 2 else None


def _requirements_lines(data: bytes) -> Iterator[Found]:
    """Each requirement and each index option or link of a requirements file, where it is. A
    line can be added before a requirement only where it starts a line as pip joins them (not
    after a line continued with `\\`). Nothing is edited in a file pip installs in hash-checking
    mode: its hashes pin the exact wheels the file names now."""
    text = data.decode("utf-8")
    lines = text.splitlines(keepends=True)  # as pip splits them
    hashed = any(_HASHES.search(line.split(" #")[0]) for line in lines if not line.lstrip().startswith("#"))
    held = HASHED if hashed else None
    offset, continued = 0, False
    for raw in lines:
        line = raw.rstrip("\r\n")
        start, after_continued = offset, continued
        offset += len(raw.encode())
        commented = bool(_PIP_COMMENT.search(line))
        continued = line.endswith("\\") and not commented
        body = line.split(" #")[0] if not line.lstrip().startswith("#") else ""
        stripped = body.strip()
        if not stripped:
            continue
        lead = start + len(line[: len(line) - len(line.lstrip())].encode())
        if stripped.startswith("-"):
            for option in _PIP_OPTION.finditer(body):
                yield Found(start + len(body[: option.start(3)].encode()), option[3], "index", held)
        elif re.match(r"[a-z+]+://", stripped):  # a wheel or archive by its URL
            yield Found(lead, stripped.split()[0], "index", held)
        else:  # a requirement, less the per-requirement options pip takes after it (--hash)
            requirement = stripped.rstrip("\\").split(" --")[0].rstrip()
            yield Found(lead, requirement, held=held, no_new_line=CONTINUED if after_continued else None)


def _pyproject_strings(document: dict) -> Iterator[tuple[str, str]]:
    """(kind, text) of what pyproject.toml requires: PEP 621 and dependency groups, the build
    system, Poetry's dependency tables, and the indexes uv, Poetry and PDM install from. A value
    of another type than the spec's (a number where a list goes) holds nothing to read."""
    project = _mapping(document, "project")
    yield from (("requirement", r) for r in _texts(project.get("dependencies")))
    for group in _mapping(project, "optional-dependencies").values():
        yield from (("requirement", r) for r in _texts(group))
    for group in _mapping(document, "dependency-groups").values():
        yield from (("requirement", r) for r in _texts(group))
    yield from (("requirement", r) for r in _texts(_mapping(document, "build-system").get("requires")))
    tool = _mapping(document, "tool")
    poetry = _mapping(tool, "poetry")
    groups = [g for g in _mapping(poetry, "group").values() if isinstance(g, dict)]
    tables = [_mapping(poetry, "dependencies"), *(_mapping(g, "dependencies") for g in groups)]
    for table in tables:
        yield from (("poetry", name) for name in table if name != "python")
    sources = [
        *_list(_mapping(tool, "uv").get("index")),
        *_list(poetry.get("source")),
        *_list(_mapping(tool, "pdm").get("source")),
    ]
    for source in sources:
        if isinstance(source, dict) and isinstance(source.get("url"), str):
            yield "index", source["url"]


def _mapping(table: dict, key: str) -> dict:
    value = table.get(key)
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list:
    return value if isinstance(value, list) else []


def _texts(value: object) -> list[str]:
    return [item for item in _list(value) if isinstance(item, str)]


def _located(data: bytes, wanted: Iterator[tuple[str, str]]) -> list[Found]:
    """Where each string is in the file: its next quoted spelling (a Poetry key: at the start of
    a line); one that is not spelled plainly (escapes) is found by its name and held."""
    text = data.decode("utf-8")
    taken: set[int] = set()
    found = []
    for kind, value in wanted:
        if kind == "poetry":
            pattern = rf"^[ \t]*\"?({re.escape(value)})\"?[ \t]*="
        else:
            pattern = rf"[\"']({re.escape(value)})[\"']"
        spots = [m for m in re.finditer(pattern, text, re.MULTILINE) if m.start(1) not in taken]
        if spots:
            taken.add(spots[0].start(1))
            at = len(text[: spots[0].start(1)].encode())
            found.append(Found(at, value, "index" if kind == "index" else "requirement"))
    return found


_SETUP_KEYWORDS = {"install_requires", "setup_requires", "tests_require", "extras_require"}


def _setup_py_requirements(data: bytes) -> Iterator[Found]:
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return
    starts = byte_starts(data)
    bound = {
        target.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in _SETUP_KEYWORDS:
            value = bound.get(node.value.id, node.value) if isinstance(node.value, ast.Name) else node.value
            for string in _strings(value, bound):
                start, end = byte_span(string, starts)
                raw = data[start:end].decode("utf-8", errors="replace")
                quote = re.match(r"(\"\"\"|'''|\"|')", raw)
                plain = quote is not None and raw[len(quote[0]) : -len(quote[0])] == string.value
                width = len(quote[0]) if quote and plain else 0
                yield Found(start + width, str(string.value), held=None if plain else ESCAPED)


def _strings(node: ast.expr, bound: dict[str, ast.expr]) -> Iterator[ast.Constant]:
    """The string constants of a requirements list (a dict of them, for extras)."""
    if isinstance(node, ast.Name) and node.id in bound:
        node = bound[node.id]
    if isinstance(node, ast.Dict):
        for value in node.values:
            yield from _strings(value, bound)
    elif isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        yield from (e for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    elif isinstance(node, ast.BinOp):  # BASE + EXTRA
        yield from _strings(node.left, bound)
        yield from _strings(node.right, bound)


def _setup_cfg_requirements(data: bytes) -> Iterator[Found]:
    """Requirements of setup.cfg's `[options]` *_requires keys and `[options.extras_require]`:
    the value after `=` and its indented continuation lines, one requirement each."""
    section, listing, offset = "", False, 0
    for raw in data.decode("utf-8").splitlines(keepends=True):
        start, line = offset, raw.rstrip("\r\n")
        offset += len(raw.encode())
        if line.startswith("["):
            section, listing = line.strip("[] \t"), False
            continue
        value_at = 0
        if line and not line[0].isspace():
            key, equals, _ = line.partition("=")
            key = key.strip()
            listing = bool(equals) and (
                section == "options.extras_require" or (section == "options" and key.endswith("_requires"))
            )
            value_at = line.index("=") + 1 if listing else 0
        if not listing or line.lstrip().startswith(("#", ";")):
            continue
        value = line[value_at:]
        stripped = value.strip()
        if stripped:
            lead = value_at + len(value) - len(value.lstrip())
            yield Found(start + len(line[:lead].encode()), stripped)


def _conda_entries(text: str) -> Iterator[Found]:
    document = yaml.compose(text, Loader=LOADER)
    if not isinstance(document, yaml.MappingNode):
        return
    for key, value in document.value:
        if key.value == "channels" and isinstance(value, yaml.SequenceNode):
            yield from (_at(text, item, "index") for item in value.value if isinstance(item, yaml.ScalarNode))
        if key.value != "dependencies" or not isinstance(value, yaml.SequenceNode):
            continue
        for item in value.value:
            if isinstance(item, yaml.ScalarNode):
                yield _at(text, item, "conda")
            elif isinstance(item, yaml.MappingNode):
                for pip_key, pip in item.value:
                    if pip_key.value == "pip" and isinstance(pip, yaml.SequenceNode):
                        for line in pip.value:
                            if isinstance(line, yaml.ScalarNode):
                                yield _pip_line(_at(text, line, "requirement"))


def _at(text: str, node: yaml.ScalarNode, kind: str) -> Found:
    place = spelled(text, node)
    return Found(place.start, node.value, kind, held=place.held)


def _pip_line(found: Found) -> Found:
    """A `pip:` entry: a requirement, or an index option whose URL is the site."""
    option = _PIP_OPTION.match(found.text)
    if option is None:
        return found
    return Found(found.start + len(found.text[: option.start(3)].encode()), option[3], "index", found.held)
