"""The rule-file format: pydantic models are the one source of truth for validation and the
published JSON Schema; `load_rules` turns YAML files into validated, ready-to-match rules."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from npu_migrate.patterns import METAVARIABLE, Pattern

# Built-in codes are NPU + 3 digits; a team's own rules take their own prefix (ACME101).
CODE_PATTERN = r"^[A-Z]{2,8}\d{3}$"
Names = Annotated[list[str], Field(min_length=1)]


def _compiles(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"not a valid regex: {exc}") from None
    return value


Regex = Annotated[str, AfterValidator(_compiles)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Applicability(str, Enum):
    safe = "safe"  # exact equivalent: applied by default
    unsafe = "unsafe"  # may change behaviour: applied only with --unsafe
    manual = "manual"  # report only: a human must act


class Severity(str, Enum):
    error = "error"
    warning = "warning"
    info = "info"


# ---------------------------------------------------------------- argument positions


class ArgCondition(Strict):
    """A condition on one argument of a matched call."""

    string: Regex | None = Field(default=None, description="Regex the string value must match.")
    name: list[str] | None = Field(default=None, description="Qualified names the value must resolve to.")
    present: bool | None = Field(default=None, description="Whether the argument must be given.")
    code: list[str] | None = Field(
        default=None, description="Source texts the value must be one of, e.g. ['True']."
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

    of: Names = Field(
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


# ---------------------------------------------------------------- match kinds


class NameMatch(Strict):
    name: Names = Field(
        description="Qualified names resolved through imports; 'a.b.*' matches everything under a.b."
    )


class CallMatch(Strict):
    call: Names = Field(description="Qualified callee names, resolved through imports.")
    signature: list[str] = Field(default_factory=list, description="Positional parameter names.")
    args: dict[str, ArgCondition] = Field(
        default_factory=dict, description="Conditions on arguments, by parameter name."
    )
    strict: bool = Field(
        default=False,
        description="Match only calls whose arguments all fit `signature` (no other keywords, "
        "no *args or **kwargs): what a fix does not know, it must not drop.",
    )


class MethodMatch(Strict):
    method: Names = Field(description="Method names called on any receiver, e.g. 'cuda'.")
    signature: list[str] | None = Field(
        default=None,
        description="The method's parameters: a call passing other keywords, or more positional "
        "arguments, is some other class's method of the same name and is left alone.",
    )
    args: dict[str, ArgCondition] = Field(
        default_factory=dict, description="Conditions on arguments, by parameter name (see signature)."
    )


class AttributeMatch(Strict):
    attribute: Names = Field(description="Attribute names read on any receiver, e.g. 'is_cuda'.")


class StringContext(Strict):
    """One place where a string literal denotes the thing the rule is about."""

    argument: Argument | None = None
    compare: list[str] | None = Field(
        default=None,
        description="Globs over the source text of the other operand of ==, != or in.",
    )
    assign: list[str] | None = Field(
        default=None, description="Globs over the assigned name (or attribute name)."
    )
    param: list[str] | None = Field(
        default=None, description="Globs over function parameter names (default values)."
    )
    subscript: list[str] | None = Field(
        default=None, description="Qualified names of the subscripted mapping, e.g. os.environ."
    )
    key: list[str] | None = Field(
        default=None, description="Globs over the dict-literal key whose value this is."
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> StringContext:
        given = [k for k, v in self if v is not None]
        if len(given) != 1:
            raise ValueError("a 'where' entry needs exactly one of " + ", ".join(self.model_fields))
        return self


class StringMatch(Strict):
    string: Regex = Field(
        description="Regex that must match the whole literal text; f-string fields read as '{}'."
    )
    where: Annotated[list[StringContext], Field(min_length=1)]


class ImportMatch(Strict):
    import_: Names = Field(
        alias="import", description="Imported modules; 'pkg.*' also matches its submodules."
    )


def _parses(value: str) -> str:
    try:
        Pattern.compile(value)
    except Exception as exc:  # libcst's parser errors are multi-line; keep the first line
        raise ValueError(f"not a valid pattern: {str(exc).splitlines()[0]}") from None
    return value


class PatternMatch(Strict):
    pattern: Annotated[str, AfterValidator(_parses)] = Field(
        description="Python expression or statement; $NAME metavariables match any expression."
    )
    simple: list[str] = Field(
        default_factory=list,
        description="Metavariables that must match a plain name or attribute chain (safe to repeat).",
    )
    exclude: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Code a metavariable must not match, e.g. {P: [self]}.",
    )
    assigned: list[Annotated[str, AfterValidator(_parses)]] = Field(
        default_factory=list,
        description="Assignment patterns, one of which must bind the match's names earlier in the "
        "same function, e.g. '$A, $B = $X.chunk(2, dim=-1)': the names are assigned only there, "
        "and $X is a plain name not assigned there or after it.",
    )


MATCH_KINDS: dict[str, type[Strict]] = {
    "name": NameMatch,
    "call": CallMatch,
    "method": MethodMatch,
    "attribute": AttributeMatch,
    "string": StringMatch,
    "import": ImportMatch,
    "pattern": PatternMatch,
}


def _match_kind(value: Any) -> str | None:
    if isinstance(value, dict):
        return next((kind for kind in MATCH_KINDS if kind in value), None)
    return next((k for k, cls in MATCH_KINDS.items() if isinstance(value, cls)), None)


Match = Annotated[
    Annotated[NameMatch, Tag("name")]
    | Annotated[CallMatch, Tag("call")]
    | Annotated[MethodMatch, Tag("method")]
    | Annotated[AttributeMatch, Tag("attribute")]
    | Annotated[StringMatch, Tag("string")]
    | Annotated[ImportMatch, Tag("import")]
    | Annotated[PatternMatch, Tag("pattern")],
    Discriminator(
        _match_kind,
        custom_error_type="match_kind",
        custom_error_message="match needs one of: " + ", ".join(MATCH_KINDS),
    ),
]

# ---------------------------------------------------------------- fixes


class KeywordEdit(Strict):
    set: dict[str, str] = Field(
        default_factory=dict, description="Keyword -> Python expression to set (added if absent)."
    )
    rename: dict[str, str] = Field(default_factory=dict, description="Old keyword -> new keyword.")
    drop: list[str] = Field(default_factory=list, description="Keywords to remove.")


class Substitute(Strict):
    pattern: Regex = Field(description="Regex applied to the string literal's text.")
    to: str = Field(alias="with", description="Replacement text (regex backreferences allowed).")


class Fix(Strict):
    rename: dict[str, str] | None = Field(
        default=None,
        description="Qualified-name prefix (or method / attribute name) -> its replacement.",
    )
    template: str | None = Field(
        default=None,
        description="Replacement code; $NAME inserts what a pattern metavariable matched, or for a "
        "call match the argument of that parameter. A keyword argument whose value needs an "
        "absent argument (without a default) is left out.",
    )
    defaults: dict[str, str] = Field(
        default_factory=dict,
        description="For call templates: code standing for an absent argument (may use $NAME).",
    )
    substitute: list[Substitute] | None = Field(
        default=None, description="Regex replacements applied in order to a string literal's text."
    )
    keywords: KeywordEdit | None = None
    drop_unused_imports: list[str] = Field(
        default_factory=list,
        description="Qualified names whose imports are removed once the fix leaves them unused "
        "(e.g. flash_attn.flash_attn_func, which an NPU host cannot import).",
    )
    add_import: list[str] = Field(
        default_factory=lambda: ["torch_npu"],
        description="Modules the fixed code needs imported (default: torch_npu).",
    )

    @model_validator(mode="after")
    def _one_edit(self) -> Fix:
        edits = [k for k in ("rename", "template", "substitute", "keywords") if getattr(self, k)]
        if len(edits) != 1:
            raise ValueError("a fix needs exactly one of rename, template, substitute, keywords")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in ("rename", "template", "substitute", "keywords") if getattr(self, k))


# ---------------------------------------------------------------- examples and rules


class Example(Strict):
    before: str | None = Field(default=None, description="Code the fix rewrites ...")
    after: str | None = Field(default=None, description="... into exactly this.")
    flagged: str | None = Field(default=None, description="Code reported but left unchanged.")
    ok: str | None = Field(default=None, description="Code the rule must not touch or report.")

    @model_validator(mode="after")
    def _shape(self) -> Example:
        if (self.before is None) != (self.after is None):
            raise ValueError("'before' and 'after' come together")
        given = sum(x is not None for x in (self.before, self.flagged, self.ok))
        if given != 1:
            raise ValueError("an example is one of: before/after, flagged, ok")
        return self


class Rule(Strict):
    code: str = Field(
        pattern=CODE_PATTERN, description="Stable code: a prefix (NPU for the built-in rules) + 3 digits."
    )
    name: str = Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$", description="Short kebab-case name.")
    summary: str = Field(description="What the rule finds, one line.")
    why: str = Field(description="Why it matters on Ascend and what to do.")
    message: str = Field(description="The finding's text; {match} is the matched code.")
    applicability: Applicability
    severity: Severity
    match: Match
    fix: Fix | None = None
    examples: Annotated[list[Example], Field(min_length=1)]
    # Set on load from the rule file, never written in it (hidden from the published schema).
    category: SkipJsonSchema[str] = ""
    source: SkipJsonSchema[str] = ""

    @model_validator(mode="after")
    def _fix_fits(self) -> Rule:
        if (self.applicability is Applicability.manual) != (self.fix is None):
            raise ValueError("manual rules have no fix; safe and unsafe rules need one")
        if self.fix and self.fix.template:
            if isinstance(self.match, PatternMatch):
                bindable = set(METAVARIABLE.findall(" ".join([self.match.pattern, *self.match.assigned])))
            elif isinstance(self.match, CallMatch):
                bindable = set(self.match.signature) | set(self.match.args)
            else:
                raise ValueError("a template fix needs a pattern or call match")
            used = METAVARIABLE.findall(self.fix.template + " ".join(self.fix.defaults.values()))
            unbound = set(used) - bindable
            if unbound:
                raise ValueError(
                    f"the template uses ${', $'.join(sorted(unbound))}, which the match does not bind"
                )
        if self.fix and self.fix.substitute and not isinstance(self.match, StringMatch):
            raise ValueError("a substitute fix needs a string match")
        if self.fix and self.fix.keywords and not isinstance(self.match, CallMatch):
            raise ValueError("a keywords fix needs a call match")
        if self.fix and self.fix.rename and isinstance(self.match, StringMatch | PatternMatch | ImportMatch):
            raise ValueError("a rename fix needs a name, call, method or attribute match")
        fixing = [e for e in self.examples if e.before is not None]
        if self.fix is None and fixing:
            raise ValueError("manual rules use 'flagged' examples, not before/after")
        if self.fix is not None and not fixing:
            raise ValueError("a rule with a fix needs at least one before/after example")
        return self

    @property
    def match_kind(self) -> str:
        return _match_kind(self.match) or ""


class RuleFile(Strict):
    category: str = Field(pattern=r"^[a-z][a-z0-9-]*$")
    codes: str = Field(
        pattern=r"^[A-Z]{2,8}\d(xx|\dx)$",
        description="The block of codes this file owns: NPU1xx (100-199), NPU90x (900-909), ACME1xx.",
    )
    description: str
    rules: Annotated[list[Rule], Field(min_length=1)]

    @model_validator(mode="after")
    def _codes_in_block(self) -> RuleFile:
        for rule in self.rules:
            if not rule.code.startswith(self.codes.rstrip("x")):
                raise ValueError(f"rule {rule.code} lies outside this file's block {self.codes}")
        return self


class RuleError(Exception):
    """A rule file that cannot be used; the message is one line naming file, rule and field."""


def _one_line_error(path: Path, data: Any, error: ValidationError) -> str:
    first = error.errors()[0]
    loc = list(first["loc"])
    where = ""
    if len(loc) >= 2 and loc[0] == "rules" and isinstance(loc[1], int):
        rules = data.get("rules") if isinstance(data, dict) else None
        rule = rules[loc[1]] if isinstance(rules, list) and loc[1] < len(rules) else None
        code = rule.get("code") if isinstance(rule, dict) else None
        where = f"rule {code or '#' + str(loc[1] + 1)}: "
        loc = loc[2:]
    if len(loc) >= 2 and loc[0] == "match" and loc[1] in MATCH_KINDS:
        loc = [loc[0], *loc[2:]]  # drop the union's tag: it repeats the field name
    field = ".".join(str(p) for p in loc) or "(rule)"
    message = first["msg"].removeprefix("Value error, ")
    return f"{path}: {where}field {field}: {message}"


def load_rule_file(path: Path) -> RuleFile:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError(f"{path}: cannot read: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise RuleError(f"{path}{line}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    try:
        parsed = RuleFile.model_validate(data)
    except ValidationError as exc:
        raise RuleError(_one_line_error(path, data, exc)) from None
    rules = [r.model_copy(update={"category": parsed.category, "source": str(path)}) for r in parsed.rules]
    return parsed.model_copy(update={"rules": rules})


def builtin_rules_dir() -> Path:
    """The catalog inside the installed wheel, or rules/ beside the package in a checkout."""
    packaged = Path(__file__).parent / "_rules"
    return packaged if packaged.is_dir() else Path(__file__).parent.parent / "rules"


def rule_files(paths: Iterable[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.glob("*.yaml") if p.is_file()))
        elif path.is_file():
            found.append(path)
        else:
            raise RuleError(f"{path}: no such rule file or folder")
    return found


def load_rules(extra: Iterable[Path] = (), builtin: bool = True) -> list[Rule]:
    """Load the built-in catalog plus user rule files; codes must be unique across all."""
    paths = ([builtin_rules_dir()] if builtin else []) + list(extra)
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    for path in rule_files(paths):
        for rule in load_rule_file(path).rules:
            if rule.code in seen:
                raise RuleError(f"{path}: rule {rule.code}: field code: already defined in {seen[rule.code]}")
            seen[rule.code] = str(path)
            rules.append(rule)
    return rules


def json_schema() -> str:
    """The JSON Schema of a rule file, for editors (generated, never hand-written)."""
    schema = RuleFile.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "npu-migrate rule file"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
