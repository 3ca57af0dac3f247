"""Match kinds for dependency files (requirements files, pyproject.toml, setup.py, setup.cfg, a
conda environment.yml; npu_migrate/dependencies.py reads them): `package`, a requirement by its
package's name (and, with `version`, by what its version says), and `package_index`, an index,
link or channel the file installs from."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, ClassVar

from pydantic import Field

from npu_migrate.engine.kinds.fields import Regex, Strict
from npu_migrate.engine.kinds.site import SiteKind, found, full_match

if TYPE_CHECKING:
    from npu_migrate.engine.sites import Site


def normalized(name: str) -> str:
    """A package's name as PEP 503 compares them: `Flash_Attn` is `flash-attn`."""
    return re.sub(r"[-_.]+", "-", name).lower()


class PackageMatch(Strict):
    package: Regex = Field(
        description="Regex the package's whole name must match, normalized as PEP 503 does (lower "
        "case, each run of `-`, `_`, `.` one `-`: `flash-attn`)."
    )
    version: Regex | None = Field(
        default=None,
        description="Regex searched in the requirement's version (`==2.1.0+cu121`, a conda build "
        "string): the rule matches that version, not the requirement.",
    )
    unless: list[str] = Field(
        default_factory=list,
        description="Packages (normalized names) whose requirement in the same file settles the "
        "matter: the rule does not match there.",
    )


class PackageIndexMatch(Strict):
    package_index: Regex = Field(
        description="Regex searched in an index URL, link or conda channel the file installs from."
    )


class PackageKind(SiteKind):
    key = "package"
    schema = PackageMatch
    fixes = frozenset({"substitute", "add_line"})
    content: ClassVar[str] = "requirements"

    @staticmethod
    def keys(match: PackageMatch) -> set[str]:
        return {f"package:{match.package}:{match.version}"}

    @staticmethod
    def hit(match: PackageMatch, site: Site) -> bool:
        if site.kind != ("version" if match.version else "requirement"):
            return False
        if not full_match(match.package, site.facts["NAME"]):
            return False
        if set(site.facts.get("PACKAGES", "").split()) & set(match.unless):
            return False
        return match.version is None or found(match.version, site.text)


class PackageIndexKind(SiteKind):
    key = "package_index"
    schema = PackageIndexMatch
    fixes = frozenset({"substitute"})
    content: ClassVar[str] = "requirements"

    @staticmethod
    def keys(match: PackageIndexMatch) -> set[str]:
        return {f"package_index:{match.package_index}"}

    @staticmethod
    def hit(match: PackageIndexMatch, site: Site) -> bool:
        return site.kind == "index" and found(match.package_index, site.text)
