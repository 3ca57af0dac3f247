"""The match kind of YAML and JSON configs (DeepSpeed, accelerate, training configs;
npu_migrate/configs.py reads them): `setting`, a key by its name, with `value`, the value it
holds (a scalar, or a list as it is written); without `value`, the key itself, whatever it holds."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pydantic import Field

from npu_migrate.engine.kinds.fields import Regex, Strict
from npu_migrate.engine.kinds.site import SiteKind, full_match

if TYPE_CHECKING:
    from npu_migrate.engine.sites import Site


class SettingMatch(Strict):
    setting: Regex = Field(description="Regex the whole key must match (the key itself, not its path).")
    value: Regex | None = Field(
        default=None,
        description="Regex the whole value must match: a scalar's text (unquoted), or a list as it "
        "is written (`[0, 1]`). Without it the rule matches the key, whatever it holds.",
    )


class SettingKind(SiteKind):
    key = "setting"
    schema = SettingMatch
    fixes = frozenset({"substitute"})
    content: ClassVar[str] = "config"

    @staticmethod
    def keys(match: SettingMatch) -> set[str]:
        return {f"setting:{match.setting}:{match.value}"}

    @staticmethod
    def hit(match: SettingMatch, site: Site) -> bool:
        if site.kind != ("value" if match.value is not None else "key"):
            return False
        if not full_match(match.setting, site.facts["KEY"]):
            return False
        return match.value is None or full_match(match.value, site.text)
