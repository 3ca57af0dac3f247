"""The rule-file format: pydantic models are the one source of truth for validation and the
published JSON Schema. The `match:` mapping is one of the registered match kinds' schemas."""

from __future__ import annotations

import ast
import functools
import json
from typing import TYPE_CHECKING, Annotated, Any, Union

import libcst as cst
from pydantic import AfterValidator, Discriminator, Field, Tag, model_validator
from pydantic.json_schema import SkipJsonSchema

from npu_migrate.engine.kinds import KINDS, kind_of
from npu_migrate.engine.kinds.fields import Applicability, QualifiedNames, Regex, Severity, Strict
from npu_migrate.engine.patterns import METAVARIABLE
from npu_migrate.model import RuleInfo

# Built-in codes are NPU + 3 digits; a team's own rules take their own prefix (ACME101).
CODE_PATTERN = r"^[A-Z]{2,8}\d{3}$"
MATCH_KEYS = [kind.key for kind in KINDS]


def _match_key(value: Any) -> str | None:
    if isinstance(value, dict):
        return next((key for key in MATCH_KEYS if key in value), None)
    return next((kind.key for kind in KINDS if isinstance(value, kind.schema)), None)


if TYPE_CHECKING:
    Match = Strict
else:
    Match = Annotated[
        Union[tuple(Annotated[kind.schema, Tag(kind.key)] for kind in KINDS)],  # noqa: UP007
        Discriminator(
            _match_key,
            custom_error_type="match_kind",
            custom_error_message="match needs one of: " + ", ".join(MATCH_KEYS),
        ),
    ]


def _expression(value: str) -> str:
    try:
        cst.parse_expression(value)
    except cst.ParserSyntaxError:
        raise ValueError(f"not a Python expression: {value!r}") from None
    return value


# What a fix writes into code must be code: names are identifiers or dotted names, and values
# are expressions (checked at load, so a rule file cannot inject a statement).
Identifier = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
DottedName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")]
Expression = Annotated[str, AfterValidator(_expression)]


class KeywordEdit(Strict):
    set: dict[Identifier, Expression] = Field(
        default_factory=dict, description="Keyword -> Python expression to set (added if absent)."
    )
    rename: dict[Identifier, Identifier] = Field(
        default_factory=dict, description="Old keyword -> new keyword."
    )
    drop: list[Identifier] = Field(default_factory=list, description="Keywords to remove.")


class Substitute(Strict):
    pattern: Regex = Field(description="Regex applied to the string literal's text.")
    to: str = Field(alias="with", description="Replacement text (regex backreferences allowed).")


EDIT_KINDS = ("rename", "template", "substitute", "keywords", "add_line")


@functools.cache
def _helper_error(name: str, code: str) -> str | None:
    """Why a helper's code is not one `def` or `class` of its name, or None; checked once per
    helper (rules share them: YAML anchors in rules/fused.yaml), by the stdlib's parser, ten
    times faster than libcst's, which reads the helper where a fix adds it."""
    try:
        body = ast.parse(code).body
    except SyntaxError as exc:
        return f"helper {name} does not parse: {exc.msg} (line {exc.lineno})"
    definitions = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    if len(body) != 1 or not isinstance(body[0], definitions) or body[0].name != name:
        return f"helper {name} must be one `def {name}(...)` or `class {name}`"
    return None


class Fix(Strict):
    rename: dict[DottedName, DottedName] | None = Field(
        default=None,
        description="Qualified-name prefix (or method / attribute name) -> its replacement.",
    )
    template: str | None = Field(
        default=None,
        description="Replacement code; $NAME inserts what a pattern metavariable matched, or for a "
        "call match the argument of that parameter. A keyword argument whose value needs an "
        "absent argument (without a default) is left out. For a name match: what each reference "
        "becomes (a helper the fix adds), the import going once nothing uses it.",
    )
    defaults: dict[str, str] = Field(
        default_factory=dict,
        description="For call templates: code standing for an absent argument, or one passed as "
        "None (torch's and flash-attn's None means the default; may use $NAME).",
    )
    substitute: list[Substitute] | None = Field(
        default=None, description="Regex replacements applied in order to a string literal's text."
    )
    add_line: str | None = Field(
        default=None,
        description="A line added before the matched one, with its indentation (files that are not "
        "Python: a requirement beside another); $NAME inserts what the handler found there ($VERSION: "
        "a requirement's pinned version).",
    )
    guard: str | None = Field(
        default=None,
        description="For template fixes: a call (of a helper, with $NAME as the template has them) "
        "that returns why the fused operator cannot take this call's values at run time (a short "
        "reason) or None. The code becomes `(<template> if <guard> is None else <the code as it "
        "was>)`, and a statement run an `if`/`else` with the statements kept in the `else`: the "
        "operator's limits on tensors (device, rank, dtype, head dim) are checked where they are "
        "known, and the original runs unchanged where they do not hold.",
    )
    keywords: KeywordEdit | None = None
    drop_unused_imports: list[DottedName] = Field(
        default_factory=list,
        description="Qualified names whose imports are removed once the fix leaves them unused "
        "(e.g. flash_attn.flash_attn_func, which an NPU host cannot import).",
    )
    drop_checks: list[DottedName] = Field(
        default_factory=list,
        description="Functions that check for the CUDA package the fix replaces (Megatron's "
        "`assert_grouped_gemm_is_available`): a statement that only calls one goes from a file "
        "where the fix applied.",
    )
    add_import: list[DottedName] = Field(
        default_factory=lambda: ["torch_npu"],
        description="Modules the fixed code needs imported (default: torch_npu).",
    )
    helpers: dict[Identifier, str] = Field(
        default_factory=dict,
        description="Module-level functions (or an autograd Function's class) the fixed code calls "
        "(name -> its def), added once after the imports of a file that has no top-level name of "
        "that name yet: what the fix "
        "would otherwise rebuild at every call (a constant mask) is built once.",
    )

    @model_validator(mode="after")
    def _helpers_define_themselves(self) -> Fix:
        for name, code in self.helpers.items():
            error = _helper_error(name, code)
            if error is not None:
                raise ValueError(error)
        return self

    @model_validator(mode="after")
    def _guard_is_a_call(self) -> Fix:
        if self.guard is None:
            return self
        if not self.template:
            raise ValueError("guard: only a template fix has a fused form to guard")
        try:
            guard = cst.parse_expression(self.guard.replace("$", "_m_"))
        except cst.ParserSyntaxError as exc:
            raise ValueError(f"guard does not parse: {exc.message}") from None
        if not isinstance(guard, cst.Call) or not isinstance(guard.func, cst.Name):
            raise ValueError("guard: one call of a helper, e.g. why_not_npu_rotary_mul($X, $COS, $SIN)")
        if guard.func.value not in self.helpers:
            raise ValueError(f"guard: {guard.func.value} is not one of the fix's helpers")
        return self

    @model_validator(mode="after")
    def _one_edit(self) -> Fix:
        edits = [k for k in EDIT_KINDS if getattr(self, k)]
        if len(edits) != 1:
            raise ValueError("a fix needs exactly one of " + ", ".join(EDIT_KINDS))
        return self

    @property
    def kind(self) -> str:
        return next(k for k in EDIT_KINDS if getattr(self, k))


# ---------------------------------------------------------------- examples and rules


class Example(Strict):
    before: str | None = Field(default=None, description="Code the fix rewrites ...")
    after: str | None = Field(default=None, description="... into exactly this.")
    flagged: str | None = Field(default=None, description="Code reported but left unchanged.")
    ok: str | None = Field(default=None, description="Code the rule must not touch or report.")
    file: str | None = Field(
        default=None,
        pattern=r"^[\w.+-]+$",
        description="The example file's name, where the kind of file is not the one the rule's match "
        "kind reads by default (a conda `environment.yml` for a requirements rule, a `Dockerfile`).",
    )

    @model_validator(mode="after")
    def _shape(self) -> Example:
        if (self.before is None) != (self.after is None):
            raise ValueError("'before' and 'after' come together")
        given = sum(x is not None for x in (self.before, self.flagged, self.ok))
        if given != 1:
            raise ValueError("an example is one of: before/after, flagged, ok")
        return self


class FileWords(Strict):
    words: Annotated[list[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]], Field(min_length=1)]
    why: str = Field(description="Why the fix is held back in such a file.")


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
    supersedes: list[Annotated[str, Field(pattern=CODE_PATTERN)]] = Field(
        default_factory=list,
        description="Codes of rules this one wins over where both match the same node (a specific "
        "rewrite over the generic report). Rules of one layer that can match the same node must "
        "declare their order; a user's rule always wins over the catalog.",
    )
    harmless_on_npu: bool = Field(
        default=False,
        description="The code this rule reports, left as it is, runs on an NPU without failing (a "
        "cuDNN flag, an NCCL variable): a CUDA guard over it may still be migrated. Otherwise a "
        "guard over code the run leaves as it is keeps its CUDA test, so an NPU run never reaches it.",
    )
    probes: list[Identifier] = Field(
        default_factory=list,
        description="Names this rule matches (their last part: `is_available`, `is_cuda`) whose value "
        "asks about CUDA and is falsy on a host without it (False, 0) rather than an error. Where "
        "such a value flows (a variable, an attribute, a helper's return), the code it decides on was "
        "dead on an NPU before the migration: its fix is held while that code keeps CUDA-only code.",
    )
    only_with: list[Annotated[str, Field(pattern=CODE_PATTERN)]] = Field(
        default_factory=list,
        description="Report only in files where one of these rules matches too (a check that "
        "matters only beside a fused optimizer, say). Report-only rules only.",
    )
    hold_in_files_with: FileWords | None = Field(
        default=None,
        description="Hold the fix back in files that mention one of these words, saying why (the "
        "fused optimizers reject the bf16 parameters a file that mentions bfloat16 may have).",
    )
    rewritten_whole: bool = Field(
        default=False,
        description="A report about an expression that a human rewrites as a whole (a CUDA compute "
        "capability read from device properties): the fixes of other rules inside it are held, since "
        "renamed alone the expression would still fail where it did.",
    )
    needs_npu_data: str | None = Field(
        default=None,
        description="The fixed code works only on data on the NPU, saying why (the fused "
        "optimizers pack their parameters there): the fix is held in a function whose device its "
        "caller chooses (a parameter named like `device`: a test's fixture may pick the CPU).",
    )
    states: dict[Identifier, QualifiedNames] = Field(
        default_factory=dict,
        description="Device state that some of the names this rule matches read or write (`rng`: "
        "the generator's seed and offset, and the queue its setters go through). Where a use of a "
        "state stays CUDA in a file (held, suppressed, reported, or behind a CUDA test that stays), "
        "the fixes of its other uses there are held: a state split between two devices fails "
        "silently (a getter on the NPU whose setter stays on CUDA restores nothing).",
    )
    last_resort: bool = Field(
        default=False,
        description="Report only where no other rule matches the same code: a catch-all that keeps "
        "a trace from going unreported without doubling the findings of the rules that know it.",
    )
    # Set on load from the rule file, never written in it (hidden from the published schema).
    category: SkipJsonSchema[str] = ""
    source: SkipJsonSchema[str] = ""
    builtin: SkipJsonSchema[bool] = False  # from the catalog shipped with the tool

    @model_validator(mode="after")
    def _fix_fits(self) -> Rule:
        if (self.applicability is Applicability.manual) != (self.fix is None):
            raise ValueError("manual rules have no fix; safe and unsafe rules need one")
        kind = kind_of(self.match)
        refused = kind.refuses(self.match, self.fix is not None)
        if refused:
            raise ValueError(refused)
        if self.fix and self.fix.kind not in kind.fixes:
            able = [k.key for k in KINDS if self.fix.kind in k.fixes]
            raise ValueError(f"a {self.fix.kind} fix needs a {' or '.join(able)} match")
        if self.fix and self.fix.template:
            used = METAVARIABLE.findall(self.fix.template + " ".join(self.fix.defaults.values()))
            unbound = set(used) - kind.bindable(self.match)
            if unbound:
                raise ValueError(
                    f"the template uses ${', $'.join(sorted(unbound))}, which the match does not bind"
                )
        if self.code in self.supersedes:
            raise ValueError("a rule cannot supersede itself")
        if self.only_with and self.fix is not None:
            raise ValueError("only_with is for report-only rules: a fix must not depend on other findings")
        if self.hold_in_files_with and self.fix is None:
            raise ValueError("hold_in_files_with holds a fix back: this rule has none")
        if self.rewritten_whole and self.fix is not None:
            raise ValueError("rewritten_whole is for a report a human acts on: this rule has a fix")
        if self.needs_npu_data and self.fix is None:
            raise ValueError("needs_npu_data holds a fix back: this rule has none")
        fixing = [e for e in self.examples if e.before is not None]
        if self.fix is None and fixing:
            raise ValueError("manual rules use 'flagged' examples, not before/after")
        if self.fix is not None and not fixing:
            raise ValueError("a rule with a fix needs at least one before/after example")
        return self

    @property
    def info(self) -> RuleInfo:
        """What reports need of this rule."""
        return RuleInfo(self.code, self.name, self.category, self.severity, self.applicability, self.message)

    @property
    def match_kind(self) -> str:
        return kind_of(self.match).key


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


def json_schema() -> str:
    """The JSON Schema of a rule file, for editors (generated, never hand-written)."""
    schema = RuleFile.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "npu-migrate rule file"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
