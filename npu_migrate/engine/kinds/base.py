"""What a match kind is. A kind owns the `match:` schema of its rules, what it tells the
prefilter, the keys by which rules of any kind are found to overlap, and the hooks that find its
rules in one file. The engine drives kinds through this interface only; it never names a rule.

A kind's per-file `Matcher` has libcst-style hooks: `visit_<Node>(node)` to take notes on the
way down, and `leave_<Node>(original, updated) -> list[Candidate]` to propose matches on the
way up. The transformer settles the candidates of every kind on a node by rule precedence."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Generic, TypeVar, cast

import libcst as cst

from npu_migrate.engine.kinds.fields import Strict

if TYPE_CHECKING:
    from npu_migrate.engine.context import FileContext
    from npu_migrate.engine.regions import Anchors
    from npu_migrate.engine.sites import Site
    from npu_migrate.model import Hold
    from npu_migrate.prefilter import Prefilter
    from npu_migrate.rules.schema import Rule

Fixed = cst.CSTNode | cst.FlattenSentinel[cst.CSTNode]
Schema = TypeVar("Schema", bound=Strict)


@dataclass(frozen=True)
class Candidate:
    """A rule that matches a node, with the node as its fix would leave it."""

    rule: Rule
    fixed: Fixed | None  # None: the rule reports only (or its fix cannot apply here)
    imports: tuple[str, ...] = ()  # modules the fix needs besides the rule's add_import
    part: str = ""  # what in the node it is about (an imported name): other parts never compete
    specificity: int = 0  # a rule on a more specific name beats one on a prefix
    held: Hold | None = None  # why the fix must not apply here, as the matcher sees it
    attribute: str | None = None  # the attribute it reads, which the code may bind itself (its own)
    hoists: tuple[Hoist, ...] = ()  # statements the fix needs before an earlier line (PatternMatch.hoist)
    at: tuple[cst.CSTNode, cst.CSTNode] | None = None  # the statements it spans (first, last), not the node
    # (attribute, classes): the file binds each attribute to these classes only (StatementsMatch.instance_of)
    instance_of: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Hoist:
    """`name = <target's code>` put before `line`, whose `target` then reads `name`."""

    line: cst.SimpleStatementLine  # in the original tree
    target: cst.BaseExpression  # in the original tree, inside `line`
    variable: str  # the metavariable that matched `target`
    name: str


VisitHook = Callable[[cst.CSTNode], object]
LeaveHook = Callable[[cst.CSTNode, cst.CSTNode], list[Candidate]]


def by_name(pairs: Iterable[tuple[Rule, str]]) -> dict[str, list[Rule]]:
    """Rules by the (method, attribute, ...) name they match."""
    found: dict[str, list[Rule]] = {}
    for rule, name in pairs:
        found.setdefault(name, []).append(rule)
    return found


def hooks_of(owner: object) -> tuple[dict[type, VisitHook], dict[type, LeaveHook]]:
    """An object's `visit_<Node>` and `leave_<Node>` methods, keyed by libcst node type."""
    visits: dict[type, VisitHook] = {}
    leaves: dict[type, LeaveHook] = {}
    for prefix, node_type, attribute in _hook_names(type(owner)):
        table: dict = visits if prefix == "visit" else leaves
        table[node_type] = getattr(owner, attribute)
    return visits, leaves


def _hook_names(owner: type) -> tuple[tuple[str, type, str], ...]:
    """A class's hook methods, read once per class (matchers are made for every file)."""
    if owner not in _HOOKS:
        found = []
        for attribute in dir(owner):
            prefix, _, node = attribute.partition("_")
            if prefix in ("visit", "leave") and isinstance(node_type := getattr(cst, node, None), type):
                found.append((prefix, node_type, attribute))
        _HOOKS[owner] = tuple(found)
    return _HOOKS[owner]


_HOOKS: dict[type, tuple[tuple[str, type, str], ...]] = {}


class Matcher:
    """One kind's hooks over one file."""

    def __init__(self, ctx: FileContext, kind: Kind) -> None:
        self.ctx = ctx
        self.kind = kind

    def hooks(self) -> tuple[dict[type, VisitHook], dict[type, LeaveHook]]:
        return hooks_of(self)

    def compose(self, updated: cst.CSTNode, applied: Sequence[Candidate]) -> Fixed:
        """The node with the fixes of this kind's winning candidates applied. One fix per node
        is the rule; kinds that edit several parts of one statement (imports) override this."""
        fixed = applied[0].fixed
        return fixed if fixed is not None else updated


class Kind(ABC, Generic[Schema]):
    """One match kind over a rule set: built once per run, shared by every file."""

    key: ClassVar[str]  # the `match:` key in a rule file
    schema: ClassVar[type[Strict]]  # the model of the mapping under that key
    matcher_type: ClassVar[type[Matcher]]  # its hooks over one file
    fixes: ClassVar[frozenset[str]] = frozenset()  # the fix kinds its rules may use
    content: ClassVar[str] = "python"  # the kind of file its rules match in (else: engine/sites.py)
    one_name: ClassVar[bool] = False  # a name its rules rename everywhere in a file or nowhere

    def __init__(self, rules: Iterable[Rule]) -> None:
        self.rules = [r for r in rules if isinstance(r.match, self.schema)]
        self.entries: list[tuple[Rule, Schema]] = [(r, cast(Schema, r.match)) for r in self.rules]

    @staticmethod
    def bindable(match: Schema) -> set[str]:
        """The metavariables a template fix may use."""
        return set()

    @staticmethod
    def refuses(match: Schema, fixes: bool) -> str | None:
        """Why a rule of this match (with a fix or not) is not valid, beyond its schema."""
        return None

    @staticmethod
    def keys(match: Schema) -> set[str]:
        """What its rules match, as keys shared by every kind (`call:torch.cuda.synchronize`):
        two rules with a key in common can match the same node."""
        return set()

    @classmethod
    def overlaps(cls, a: Rule, b: Rule) -> bool:
        """Whether two rules of this kind can match the same node."""
        return bool(cls.keys(cast(Schema, a.match)) & cls.keys(cast(Schema, b.match)))

    @abstractmethod
    def need(self, prefilter: Prefilter) -> None:
        """Tell the prefilter what a file must contain for one of these rules to match."""

    @abstractmethod
    def anchor(self, anchors: Anchors) -> None:
        """Tell the region finder, rule by rule, what every match spells (see engine.regions).
        A match the regions miss is a finding lost, so a rule that cannot say gives no anchor,
        and then every file is parsed whole."""

    @staticmethod
    def hit(match: Schema, site: Site) -> bool:
        """Whether a rule of this kind matches a site of a file that is not Python."""
        return False

    def matcher(self, ctx: FileContext) -> Matcher:
        """The hooks that find these rules in one file."""
        return self.matcher_type(ctx, self)
