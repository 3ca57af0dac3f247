"""`string:` rules: string literals that denote something (a device, a backend, an environment
variable) because of where they stand: an argument of a known call, a comparison, an
assignment, a parameter default, a dict key, a subscript. Fixed by regex substitution in place."""

from __future__ import annotations

import ast
import fnmatch
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

import libcst as cst
from pydantic import Field, model_validator

from npu_migrate.engine.fixes import substitute_string
from npu_migrate.engine.kinds.arguments import (
    STRING_LITERALS,
    CalleeIndex,
    arguments,
    callee,
    conditions_hold,
    static_text,
    strings_in,
    values_in,
)
from npu_migrate.engine.kinds.base import Candidate, Kind, Matcher
from npu_migrate.engine.kinds.fields import Argument, Callees, Regex, Strict
from npu_migrate.engine.names import dotted_parts, name_matches
from npu_migrate.engine.regex import RuleRegex, compile_rule_regex
from npu_migrate.engine.regions import Anchors, Token
from npu_migrate.prefilter import Prefilter

if TYPE_CHECKING:
    from npu_migrate.engine.context import FileContext
    from npu_migrate.rules.schema import Rule

_COMPARE_OPS = (cst.Equal, cst.NotEqual, cst.In, cst.NotIn)


class StringContext(Strict):
    """One place where a string literal denotes the thing the rule is about."""

    argument: Argument | None = None
    compare: list[str] | None = Field(
        default=None,
        description="Globs over the source text of the other operand of ==, != or in.",
    )
    assign: list[str] | None = Field(
        default=None,
        description="Globs over the assigned name (an attribute's name, a subscript's string key: "
        '`cfg["device"] = ...`).',
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
    flows: Literal[True] | None = Field(
        default=None,
        description="A variable assigned the literal in a function that passes the variable where "
        'one of this rule\'s `argument` places expects it (`arg = "cuda:0"` ... '
        "`return torch.device(arg)`): the literal's use is visible in the function. And a literal "
        "a function returns where the file's calls of that function put the result in one of "
        "this rule's `assign` or keyword places (`device = get_device()`, `f(device=pick())`); and "
        "a literal passed to a parameter of a function the file defines, named as this rule's "
        '`param` places name them (`predict("cuda")` for `def predict(device):`).',
    )
    anywhere: Literal[True] | None = Field(
        default=None,
        description="Any literal at all: the last resort that reports a literal whose role cannot "
        "be seen; the rules for the places above supersede it.",
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> StringContext:
        given = [k for k, v in self if v is not None]
        if len(given) != 1:
            raise ValueError("a 'where' entry needs exactly one of " + ", ".join(type(self).model_fields))
        return self


class StringMatch(Strict):
    string: Regex = Field(
        description="Regex that must match the whole literal text; f-string fields read as '{}'."
    )
    where: Annotated[list[StringContext], Field(min_length=1)]
    except_in: Callees | None = Field(
        default=None,
        description="Calls whose arguments are messages (print, logging, exceptions): a literal "
        "passed to one is not reported. Builtins are named as they are spelled: print.",
    )
    except_beside: Regex | None = Field(
        default=None,
        description="A literal in a tuple, list or set beside a literal this regex matches whole "
        'is not in the rule\'s places: `device_type in ["cuda", "rocm"]` names a family of '
        "backends, which the NPU is not one of.",
    )


@dataclass(frozen=True)
class StringRule:
    rule: Rule
    regex: RuleRegex
    where: tuple[StringContext, ...]
    except_in: tuple[str, ...]
    except_beside: RuleRegex | None = None

    @property
    def flows(self) -> bool:
        """Whether a literal may reach one of the rule's places through a variable."""
        return any(w.flows for w in self.where)


class StringMatcher(Matcher):
    kind: StringKind

    def __init__(self, ctx: FileContext, kind: StringKind) -> None:
        super().__init__(ctx, kind)
        self.marked: dict[cst.CSTNode, list[Rule]] = {}  # string literal -> rules whose context it is in
        self.messages: dict[cst.CSTNode, set[str]] = {}  # literal -> codes of rules it is a message for
        # The variables an outermost function passes where a `flows` rule's argument places expect
        # them: (function, name) -> those rules; read once per function, when it assigns a literal
        # such a rule matches to a variable.
        self.flowing: dict[tuple[cst.FunctionDef, str], list[StringRule]] = {}
        self.read_flows: set[cst.FunctionDef] = set()
        self.flow_rules = [s for s in kind.strings if s.flows]
        self.returned_to: dict[str, list[StringRule]] = {}  # function name -> rules its calls' places have
        self.parameters: dict[str, list[str] | None] = {}  # a function the file defines -> its parameters

    def _flows_of(self, function: cst.FunctionDef, name: str, value: cst.BaseExpression) -> list[StringRule]:
        if not self._spells_a_flow(value):
            return []
        if function not in self.read_flows:
            self.read_flows.add(function)
            for call in _calls_in(function):
                self._note_flows(function, call)
        return self.flowing.get((function, name), [])

    def _note_flows(self, function: cst.FunctionDef, call: cst.Call) -> None:
        qualified = callee(self.ctx, call)
        method = call.func.attr.value if isinstance(call.func, cst.Attribute) else None
        for string_rule, value in self._at_argument_places(call, qualified, method):
            if string_rule.flows and isinstance(value, cst.Name):
                rules = self.flowing.setdefault((function, value.value), [])
                rules += [] if string_rule in rules else [string_rule]

    def _at_argument_places(
        self, call: cst.Call, qualified: str | None, method: str | None
    ) -> Iterator[tuple[StringRule, cst.BaseExpression]]:
        """The values a call passes where a rule's `argument` places expect them, with the rule."""
        for string_rule, place in self.kind.places.of(qualified, method):
            if conditions_hold(self.ctx, call, place.when, place.signature):
                for value in arguments(call, place):
                    yield string_rule, value

    def _mark(self, string_rule: StringRule, value: cst.BaseExpression) -> None:
        beside = set(_beside(value, string_rule.except_beside)) if string_rule.except_beside else set()
        for string in strings_in(value):
            if string in beside:
                continue
            text = static_text(string)
            if text is not None and string_rule.regex.fullmatch(text):
                rules = self.marked.setdefault(string, [])
                if string_rule.rule not in rules:
                    rules.append(string_rule.rule)

    def _mark_where(self, kind: str, value: cst.BaseExpression | None, accept: Callable[[Any], bool]) -> None:
        if value is None or next(strings_in(value), None) is None:  # most values: nothing to mark
            return
        for string_rule in self.kind.strings:
            for where in string_rule.where:
                spec = getattr(where, kind)
                if spec is not None and accept(spec):
                    self._mark(string_rule, value)

    def visit_Call(self, node: cst.Call) -> None:
        qualified = callee(self.ctx, node)
        method = node.func.attr.value if isinstance(node.func, cst.Attribute) else None
        spelled = ".".join(dotted_parts(node.func) or []) if qualified is None else qualified
        for string_rule in self.kind.excepted.of(spelled, method):
            for arg in node.args:
                for string in strings_in(arg.value):
                    self.messages.setdefault(string, set()).add(string_rule.rule.code)
        for string_rule, value in self._at_argument_places(node, qualified, method):
            self._mark(string_rule, value)
        if self.flow_rules and qualified is None and isinstance(node.func, cst.Name):
            self._mark_passed(node, node.func.value)

    def _mark_passed(self, call: cst.Call, function: str) -> None:
        """A literal passed to a parameter of a function the file defines (`predict("cuda")` for
        `def predict(device):`): the parameter's name says its use, as a default's would."""
        args = enumerate(call.args)
        passed = [(i, arg) for i, arg in args if not arg.star and self._spells_a_flow(arg.value)]
        if not passed:
            return
        if function not in self.parameters:
            tree = self.ctx.tree_of()
            self.parameters[function] = _parameters(tree, function) if tree is not None else None
        names = self.parameters[function]
        if names is None:
            return
        for i, arg in passed:
            name = arg.keyword.value if arg.keyword is not None else (names[i] if i < len(names) else None)
            for string_rule in self.flow_rules:
                if name and any(w.param is not None and _glob(name, w.param) for w in string_rule.where):
                    self._mark(string_rule, arg.value)

    def visit_Comparison(self, node: cst.Comparison) -> None:
        operands = [node.left, *(t.comparator for t in node.comparisons)]
        for i, target in enumerate(node.comparisons):
            if not isinstance(target.operator, _COMPARE_OPS):
                continue
            left, right = operands[i], operands[i + 1]
            for value, other in ((left, right), (right, left)):
                if isinstance(other, STRING_LITERALS):
                    continue
                text = self.ctx.module.code_for_node(other)
                self._mark_where("compare", value, functools.partial(_glob, text))

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._mark_assignment(target.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._mark_assignment(node.target, node.value)

    def _mark_assignment(self, target: cst.BaseExpression, value: cst.BaseExpression | None) -> None:
        if isinstance(target, cst.Tuple | cst.List):  # `device, backend = ..., "nccl"`: pair by pair
            for each, assigned in _unpacked(target, value):
                self._mark_assignment(each, assigned)
            return
        name = _assigned_name(target)
        if name is not None:
            self._mark_where("assign", value, lambda globs: _glob(name, globs))
        functions = self.ctx.facts.functions
        if self.flow_rules and functions and isinstance(target, cst.Name) and value is not None:
            for string_rule in self._flows_of(functions[0], target.value, value):
                self._mark(string_rule, value)

    def visit_Return(self, node: cst.Return) -> None:
        functions = self.ctx.facts.functions
        if node.value is None or not functions or not self._spells_a_flow(node.value):
            return
        name = functions[-1].name.value
        if name not in self.returned_to:
            tree = self.ctx.tree_of()
            uses = _uses_of_calls(tree, name) if tree is not None else []
            self.returned_to[name] = [s for s in self.flow_rules if any(_receives(s, use) for use in uses)]
        for string_rule in self.returned_to[name]:
            self._mark(string_rule, node.value)

    def _spells_a_flow(self, value: cst.BaseExpression) -> bool:
        texts = [static_text(s) for s in strings_in(value)]
        return any(t is not None and s.regex.fullmatch(t) for s in self.flow_rules for t in texts)

    def visit_Param(self, node: cst.Param) -> None:
        self._mark_where("param", node.default, lambda globs: _glob(node.name.value, globs))

    def visit_DictElement(self, node: cst.DictElement) -> None:
        if isinstance(node.key, cst.SimpleString) and isinstance(node.key.evaluated_value, str):
            key = node.key.evaluated_value
            self._mark_where("key", node.value, lambda globs: _glob(key, globs))

    def visit_Subscript(self, node: cst.Subscript) -> None:
        parts = dotted_parts(node.value)
        mapping = self.ctx.table.qualify(parts) if parts else None
        if mapping is None or len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
            return
        index = node.slice[0].slice.value
        self._mark_where("subscript", index, lambda names: name_matches(mapping, names))

    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString) -> list[Candidate]:
        return self._candidates(original, updated)

    def leave_FormattedString(
        self, original: cst.FormattedString, updated: cst.FormattedString
    ) -> list[Candidate]:
        return self._candidates(original, updated)

    def _candidates(
        self,
        original: cst.SimpleString | cst.FormattedString,
        updated: cst.SimpleString | cst.FormattedString,
    ) -> list[Candidate]:
        rules = self.marked.get(original, [])
        if self.kind.anywhere:
            text = static_text(original)
            rules = rules + [
                s.rule
                for s in self.kind.anywhere
                if text is not None
                and s.rule not in rules
                and s.rule.code not in self.messages.get(original, ())
                and s.regex.fullmatch(text)
            ]
        return [
            Candidate(
                rule,
                substitute_string(updated, rule.fix.substitute) if rule.fix and rule.fix.substitute else None,
            )
            for rule in rules
        ]


class StringKind(Kind[StringMatch]):
    key = "string"
    schema = StringMatch
    matcher_type = StringMatcher
    fixes = frozenset({"substitute"})

    def __init__(self, rules: Sequence[Rule]) -> None:
        super().__init__(rules)
        self.strings = [
            StringRule(
                r,
                compile_rule_regex(m.string),
                tuple(m.where),
                tuple(m.except_in or ()),
                compile_rule_regex(m.except_beside) if m.except_beside else None,
            )
            for r, m in self.entries
        ]
        self.anywhere = [s for s in self.strings if any(w.anywhere for w in s.where)]
        self.places = CalleeIndex(
            (w.argument.of, (s, w.argument)) for s in self.strings for w in s.where if w.argument is not None
        )
        self.excepted = CalleeIndex((s.except_in, s) for s in self.strings if s.except_in)

    @classmethod
    def overlaps(cls, a: Rule, b: Rule) -> bool:
        """Two string rules overlap when some context of each can hold the same literal and a
        literal from either rule's examples matches both regexes (regex intersection is
        undecidable in general; the examples are the rules' own account of what they match)."""
        ma, mb = cast(StringMatch, a.match), cast(StringMatch, b.match)
        if not any(_contexts_overlap(x, y) for x in ma.where for y in mb.where):
            return False
        texts = _example_strings(a) | _example_strings(b)
        return any(
            compile_rule_regex(ma.string).fullmatch(t) and compile_rule_regex(mb.string).fullmatch(t)
            for t in texts
        )

    def need(self, prefilter: Prefilter) -> None:
        for string in self.strings:
            prefilter.need_regex(string.regex.pattern)

    def anchor(self, anchors: Anchors) -> None:
        """A literal's text; a rule whose literal may flow reads the whole function around a
        literal assigned to a variable (the variable's use is there: _flows_of) or returned (the
        function's calls are found by its name: visit_Return)."""
        for string in self.strings:
            anchors.rule(
                [Token.regex(string.regex.pattern)],
                function=string.flows,
                only_at=(ast.Assign, ast.AnnAssign, ast.Return),
                only_in_functions=True,  # a script's flows are read from the stdlib tree
            )


def _uses_of_calls(tree: ast.Module, function: str) -> list[tuple[str, str]]:
    """Where the file puts what `function` returns: ("assign", the variable) for `device =
    get_device()`, ("keyword", the keyword) for `f(device=get_device())`; calls by name or as a
    method (`self.get_device()`)."""

    def calls(value: ast.expr | None) -> bool:
        if not isinstance(value, ast.Call):
            return False
        called = value.func
        return (isinstance(called, ast.Name) and called.id == function) or (
            isinstance(called, ast.Attribute) and called.attr == function
        )

    uses: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and calls(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            uses += [("assign", name) for target in targets if (name := _target_name(target))]
        elif isinstance(node, ast.Call):
            uses += [("keyword", k.arg) for k in node.keywords if k.arg is not None and calls(k.value)]
    return uses


def _parameters(tree: ast.Module, function: str) -> list[str] | None:
    """The positional parameters of the function the module defines at its top level by that
    name (then keyword-only ones, which only a keyword reaches); None where it defines none."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == function:
            args = node.args
            return [a.arg for a in [*args.posonlyargs, *args.args]]
    return None


def _target_name(target: ast.expr) -> str | None:
    """The name an assignment binds, as `assign` places read it (`device`, `self.device`)."""
    if isinstance(target, ast.Name):
        return target.id
    return target.attr if isinstance(target, ast.Attribute) else None


def _receives(string_rule: StringRule, use: tuple[str, str]) -> bool:
    """Whether a call's result, put where `use` says, is in one of the rule's places."""
    kind, name = use
    for where in string_rule.where:
        if kind == "assign" and where.assign is not None and _glob(name, where.assign):
            return True
        place = where.argument
        if kind == "keyword" and place is not None and "*" in place.of and name in place.keyword:
            return True
    return False


def _calls_in(node: cst.CSTNode) -> list[cst.Call]:
    calls: list[cst.Call] = []

    class Collect(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            calls.append(call)

    node.visit(Collect())
    return calls


def _beside(expr: cst.BaseExpression, regex: RuleRegex) -> Iterator[cst.CSTNode]:
    """The literals of each tuple, list or set in `expr` (as strings_in walks it) that holds a
    literal `regex` matches whole."""
    for node in values_in(expr):
        if isinstance(node, cst.Tuple | cst.List | cst.Set):
            members = [e.value for e in node.elements if isinstance(e.value, STRING_LITERALS)]
            texts = [static_text(m) for m in members]
            if any(t is not None and regex.fullmatch(t) for t in texts):
                yield from members


def _glob(name: str, globs: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, g) for g in globs)


def _globs_overlap(a: list[str], b: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(x, y) or fnmatch.fnmatchcase(y, x) for x in a for y in b)


def _callees_overlap(a: list[str], b: list[str]) -> bool:
    if "*" in a or "*" in b:
        return True
    return any(x == y or name_matches(x, [y]) or name_matches(y, [x]) for x in a for y in b)


def _places(place: Argument) -> set[str | int]:
    """The keywords and positions an argument context reads."""
    places: set[str | int] = set(place.keyword)
    places.update(place.signature.index(k) for k in place.keyword if k in place.signature)
    if place.position is not None:
        places.add(place.position)
    return places


def _contexts_overlap(a: StringContext, b: StringContext) -> bool:
    if a.anywhere or b.anywhere:
        return True
    if a.argument is not None and b.argument is not None:
        return _callees_overlap(a.argument.of, b.argument.of) and bool(
            _places(a.argument) & _places(b.argument)
        )
    if a.subscript is not None and b.subscript is not None:
        return _callees_overlap(a.subscript, b.subscript)
    if a.flows and b.flows:
        return True
    for field in ("compare", "assign", "param", "key"):
        globs_a, globs_b = getattr(a, field), getattr(b, field)
        if globs_a is not None and globs_b is not None:
            return _globs_overlap(globs_a, globs_b)
    return False


@functools.cache
def _strings_of(code: str) -> frozenset[str]:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return frozenset()
    found = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            found.add("".join(str(v.value) if isinstance(v, ast.Constant) else "{}" for v in node.values))
    return frozenset(found)


def _example_strings(rule: Rule) -> frozenset[str]:
    codes = [c for e in rule.examples for c in (e.before, e.after, e.flagged, e.ok) if c]
    return frozenset().union(*(_strings_of(c) for c in codes))


def _unpacked(
    target: cst.Tuple | cst.List, value: cst.BaseExpression | None
) -> Iterator[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """The value each target of an unpacking is given, where both sides are spelled out element
    by element (no starred element on either side); nothing otherwise."""
    if not isinstance(value, cst.Tuple | cst.List) or len(value.elements) != len(target.elements):
        return
    if any(isinstance(e, cst.StarredElement) for e in (*target.elements, *value.elements)):
        return
    yield from ((t.value, v.value) for t, v in zip(target.elements, value.elements, strict=True))


def _assigned_name(target: cst.BaseExpression) -> str | None:
    """The name an assignment target is known by: `x`, `obj.x`, `mapping["x"]`."""
    if isinstance(target, cst.Name):
        return target.value
    if isinstance(target, cst.Attribute):
        return target.attr.value
    if isinstance(target, cst.Subscript) and len(target.slice) == 1:
        key = target.slice[0].slice
        if isinstance(key, cst.Index) and isinstance(key.value, cst.SimpleString):
            value = key.value.evaluated_value
            return value if isinstance(value, str) else None
    return None
