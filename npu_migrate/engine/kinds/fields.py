"""The building blocks of the rule-file format that every match kind may use: strict models,
fix safety, severity, and where an argument sits in a call."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from npu_migrate.engine.regex import compile_rule_regex
from npu_migrate.model import Applicability, Severity

__all__ = [
    "Applicability",
    "ArgCondition",
    "Argument",
    "Callees",
    "PlainNames",
    "QualifiedNames",
    "Regex",
    "Severity",
    "Strict",
]

_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
# Qualified names, 'a.b.*' for anything under a.b.
QualifiedNames = Annotated[
    list[Annotated[str, Field(pattern=rf"^{_IDENTIFIER}(\.{_IDENTIFIER})*(\.\*)?$")]], Field(min_length=1)
]
# Callees of an argument context: qualified names, '.name' for a method, '*' for any call.
Callees = Annotated[
    list[Annotated[str, Field(pattern=rf"^(\*|\.{_IDENTIFIER}|{_IDENTIFIER}(\.{_IDENTIFIER})*(\.\*)?)$")]],
    Field(min_length=1),
]
# Plain names (a method, an attribute).
PlainNames = Annotated[list[Annotated[str, Field(pattern=rf"^{_IDENTIFIER}$")]], Field(min_length=1)]


def _compiles(value: str) -> str:
    """A regex that RE2 runs (in linear time) on its own and alongside the others (the engine
    searches many at once, so no named groups)."""
    compile_rule_regex(value)
    if re.search(r"\(\?P?<(?![=!])", value):
        raise ValueError("named groups are not allowed: use (...) or (?:...)")
    return value


Regex = Annotated[str, AfterValidator(_compiles)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ArgCondition(Strict):
    """A condition on one argument of a matched call."""

    string: Regex | None = Field(default=None, description="Regex the string value must match.")
    name: QualifiedNames | None = Field(
        default=None, description="Qualified names the value must resolve to."
    )
    present: bool | None = Field(default=None, description="Whether the argument must be given.")
    code: list[str] | None = Field(
        default=None, description="Source texts the value must be one of, e.g. ['True']."
    )
    not_code: list[str] | None = Field(
        default=None, description="Source texts the value must not be, e.g. ['None']."
    )
    default: str | None = Field(
        default=None, description="The code an absent argument stands for, for the `code` check."
    )
    simple: bool | None = Field(
        default=None,
        description="The value must be a plain name or attribute chain (safe to repeat in a fix).",
    )


class Argument(Strict):
    """Where an argument sits in a call: by keyword name (also found positionally through
    `signature`) or by position."""

    of: Callees = Field(
        description="Callees: qualified names ('torch.device', 'torch.cuda.*'), '.name' for a "
        "method on any receiver, or '*' for any call."
    )
    keyword: list[str] = Field(default_factory=list, description="Parameter names to look at.")
    position: int | None = Field(default=None, ge=0, description="Positional index to look at.")
    signature: list[str] = Field(
        default_factory=list,
        description="The callee's positional parameter names, so a parameter passed positionally "
        "is found by name.",
    )
    when: dict[str, ArgCondition] = Field(
        default_factory=dict,
        description="Conditions on the call's other arguments, by parameter name (see signature).",
    )

    @model_validator(mode="after")
    def _needs_a_place(self) -> Argument:
        if not self.keyword and self.position is None:
            raise ValueError("an argument needs 'keyword' or 'position'")
        return self
