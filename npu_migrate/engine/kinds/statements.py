"""`statements:` rules: a short run of consecutive statements in one block, linked by the names
they assign and read (eager attention written as `attn = q @ k.transpose(-2, -1) * scale`;
`attn = attn.softmax(dim=-1)`; `x = attn @ v`), fused into one expression of the statement that
reads the last of them. The fix removes the statements and puts the template in place of the
`into` expression (with a rule's run-time guard, under `if <guard> is None:`, the statements
kept in the `else`); it is made only where the data flow shows nothing else reads what the
statements computed, and where the class of a module called is the one the rule names.
Otherwise the match is reported with the fix held, and why."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, cast

import libcst as cst
from pydantic import AfterValidator, Field, model_validator

from npu_migrate.engine.fixes import framed, guard_passes, is_guard_test
from npu_migrate.engine.holds import children, subtree
from npu_migrate.engine.kinds.base import Candidate, Fixed, Kind, LeaveHook, Matcher, VisitHook
from npu_migrate.engine.kinds.fields import Strict
from npu_migrate.engine.kinds.pattern import assigned_names, parses
from npu_migrate.engine.names import dotted_parts
from npu_migrate.engine.patterns import METAVARIABLE, Pattern, code_of, fill
from npu_migrate.engine.reasons import OPERATOR_LIMIT_UNPROVEN, READ_ELSEWHERE
from npu_migrate.engine.regions import Anchors, Token
from npu_migrate.model import Hold
from npu_migrate.prefilter import Prefilter

if TYPE_CHECKING:
    from npu_migrate.engine.context import FileContext
    from npu_migrate.rules.schema import Rule

PatternSource = Annotated[str, AfterValidator(parses)]


class Step(Strict):
    pattern: PatternSource | list[PatternSource] | None = Field(
        default=None,
        description="A statement pattern, or a list of alternatives (the first that matches binds).",
    )
    if_test: PatternSource | None = Field(
        default=None,
        description="Instead of `pattern`: an `if` statement whose test matches this expression, "
        "whatever its branches do (BERT's relative-position branch). Report rules only: a fix "
        "would drop the branch.",
    )
    optional: bool = Field(default=False, description="The statement may be absent.")

    @model_validator(mode="after")
    def _one_form(self) -> Step:
        if (self.pattern is None) == (self.if_test is None):
            raise ValueError("a step has a `pattern` or an `if_test`")
        return self

    @property
    def alternatives(self) -> list[Pattern]:
        sources = [self.if_test] if self.if_test is not None else self.pattern
        return [Pattern.compile(s) for s in (sources if isinstance(sources, list) else [sources])]


class StatementsMatch(Strict):
    statements: list[Step] = Field(
        min_length=1,
        description="Consecutive statements of one block, in order; $NAME binds the same code in each.",
    )
    into: PatternSource | list[PatternSource] = Field(
        description="An expression in the statement right after them (or a list of alternatives), "
        "which the fix replaces by its template (the statements themselves are removed)."
    )
    simple: list[str] = Field(
        default_factory=list, description="Metavariables that must match a plain name or attribute chain."
    )
    instance_of: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Metavariables matching an attribute (`self.attn_drop`) that the file must bind "
        "only to instances of these classes, e.g. {DROP: [torch.nn.Dropout]}.",
    )

    @model_validator(mode="after")
    def _guards_name_metavariables(self) -> StatementsMatch:
        bound = set(METAVARIABLE.findall(" ".join(_sources(self))))
        for guard in ("simple", "instance_of"):
            unknown = set(getattr(self, guard)) - bound
            if unknown:
                raise ValueError(
                    f"{guard}: ${', $'.join(sorted(unknown))} is not a metavariable of the statements"
                )
        return self


def _sources(match: StatementsMatch) -> list[str]:
    return [p.source for step in match.statements for p in step.alternatives] + [
        p.source for p in _into(match)
    ]


def _into(match: StatementsMatch) -> list[Pattern]:
    return [Pattern.compile(s) for s in (match.into if isinstance(match.into, list) else [match.into])]


@dataclass(frozen=True)
class _Edit:
    """What an applied match does to its block (in the original tree): these statements go, and
    the reader becomes `reader_fixed`."""

    body: Sequence[cst.BaseStatement]  # the block's, as it was
    removed: tuple[cst.BaseStatement, ...]
    reader: cst.BaseStatement
    reader_fixed: cst.BaseStatement
    guard: cst.BaseExpression | None  # the rule's run-time guard: the statements stay in an `else`


class StatementsMatcher(Matcher):
    kind: StatementsKind

    def __init__(self, ctx: FileContext, kind: Kind) -> None:
        super().__init__(ctx, kind)
        self._edits: dict[int, _Edit] = {}  # id(candidate) -> its edit
        self._kept: dict[int, str] = {}  # id(block) -> the guard whose `else` it is (fused already)

    def hooks(self) -> tuple[dict[type, VisitHook], dict[type, LeaveHook]]:
        return {cst.If: self._visit_if}, {cst.IndentedBlock: self._leave}

    def _visit_if(self, node: cst.CSTNode) -> None:
        """The `else` of `if <guard>(...) is None:` keeps what a guarded fix fused already."""
        branch = cast(cst.If, node).orelse
        if not isinstance(branch, cst.Else):
            return
        for rule, _ in self.kind.entries:
            if rule.fix and rule.fix.guard and is_guard_test(cast(cst.If, node).test, rule.fix.guard):
                self._kept[id(branch.body)] = rule.fix.guard

    def _leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> list[Candidate]:
        block, fixed_block = cast(cst.IndentedBlock, original), cast(cst.IndentedBlock, updated)
        functions = self.ctx.facts.functions
        if len(block.body) < 2 or not functions or len(fixed_block.body) != len(block.body):
            return []
        candidates: list[Candidate] = []
        taken: set[int] = set()
        statements = [_matchable(statement) for statement in block.body]
        tests = [n.test if isinstance(n, cst.If) else None for n in statements]  # for if_test steps
        for start in range(len(block.body) - 1):
            for rule, match, steps, readers in self.kind.compiled:
                if rule.fix and rule.fix.guard and self._kept.get(id(block)) == rule.fix.guard:
                    continue
                found = self._match_at(steps, readers, block.body, (statements, tests), start)
                if found is None or taken & set(range(start, found[0] + 1)):
                    continue
                reader_index, bindings, into = found
                candidate = self._candidate(
                    rule, match, block, fixed_block, start, reader_index, bindings, into
                )
                if candidate is not None:
                    candidates.append(candidate)
                    taken |= set(range(start, reader_index + 1))
        return candidates

    def _match_at(
        self,
        steps: list[_Step],
        patterns: list[Pattern],
        body: Sequence[cst.BaseStatement],
        targets: tuple[list[cst.CSTNode | None], list[cst.BaseExpression | None]],
        start: int,
    ) -> tuple[int, dict[str, cst.CSTNode], cst.CSTNode] | None:
        """Where the statements from `start` match: (the reader's index, the bindings, the `into`
        node inside the reader), or None. `targets`: each statement of the body as a step
        pattern matches it, and its test where it is an `if`."""
        bindings: dict[str, cst.CSTNode] = {}
        index = start
        qualify = self.ctx.table.qualify
        for optional, of_test, alternatives in steps:
            node = targets[of_test][index] if index < len(body) else None
            found = None
            if node is not None:
                found = next(
                    (b for p in alternatives if (b := p.match(node, qualify, bindings)) is not None), None
                )
            if found is not None:
                bindings, index = found, index + 1
            elif not optional:
                return None
        if index == start or index >= len(body):
            return None
        for node in subtree(body[index]):
            for into in patterns:
                if (
                    isinstance(node, into.root_type)
                    and (found := into.match(node, qualify, bindings)) is not None
                ):
                    return index, found, node
        return None

    def _candidate(
        self,
        rule: Rule,
        match: StatementsMatch,
        block: cst.IndentedBlock,
        fixed_block: cst.IndentedBlock,
        start: int,
        reader_index: int,
        bindings: dict[str, cst.CSTNode],
        into: cst.CSTNode,
    ) -> Candidate | None:
        removed = tuple(block.body[start:reader_index])
        reader = block.body[reader_index]
        inside = {id(n) for statement in removed for n in subtree(statement)}
        if any(m.applied and id(m.node) in inside for m in self.ctx.matches):
            return None  # another fix changed these statements: its edit would be lost
        if not all(
            isinstance(b := bindings[name], cst.BaseExpression) and dotted_parts(b) for name in match.simple
        ):
            return None
        if rule.fix is None:  # a report: nothing to hold, nothing to edit
            return Candidate(rule, None, part=f"statements@{start}", at=(removed[0], reader))
        fixed = self._fixed_reader(rule, bindings, fixed_block.body[reader_index], into)
        if fixed is None:
            return None
        fixed_reader, guard, needed = fixed
        held = self._chain_read(removed, reader, into)
        instance_of = tuple(
            (parts[-1], tuple(classes))
            for name, classes in match.instance_of.items()
            if name in bindings
            for parts in [dotted_parts(cast(cst.BaseExpression, bindings[name])) or ["", ""]]
        )
        if held is None and any(not attribute for attribute, _ in instance_of):
            held = Hold(
                OPERATOR_LIMIT_UNPROVEN, "the module called is not an attribute whose class the file shows"
            )
        candidate = Candidate(
            rule,
            fixed_reader,
            needed,
            part=f"statements@{start}",
            held=held,
            at=(removed[0], reader),
            instance_of=instance_of,
        )
        self._edits[id(candidate)] = _Edit(block.body, removed, reader, fixed_reader, guard)
        return candidate

    def _fixed_reader(
        self,
        rule: Rule,
        bindings: dict[str, cst.CSTNode],
        fixed_reader: cst.BaseStatement,
        into: cst.CSTNode,
    ) -> tuple[cst.BaseStatement, cst.BaseExpression | None, tuple[str, ...]] | None:
        """The reader (as other fixes left it) with the template in place of `into`, the rule's
        guard filled in (if it has one), and the modules both need; None where another fix
        changed `into` (it is then not found as it was) or the template needs a metavariable no
        statement bound."""
        assert rule.fix is not None and rule.fix.template
        codes = {name: code_of(node, self.ctx.module) for name, node in bindings.items()}
        guard: cst.CSTNode | None = None
        try:
            template, needed = fill(rule.fix.template, codes, self.ctx.table.spell)
            if rule.fix.guard:
                guard, guard_needs = fill(rule.fix.guard, codes, self.ctx.table.spell)
                needed += guard_needs
        except ValueError:
            return None
        target = next((n for n in subtree(fixed_reader) if n.deep_equals(into)), None)
        if target is None or not isinstance(into, cst.BaseExpression):
            return None
        template = framed(cast(cst.BaseExpression, template), into)
        reader = cast(cst.BaseStatement, fixed_reader.deep_replace(target, template))
        return reader, cast(cst.BaseExpression | None, guard), tuple(needed)

    def _chain_read(
        self, removed: tuple[cst.BaseStatement, ...], reader: cst.BaseStatement, into: cst.CSTNode
    ) -> Hold | None:
        """Why the names the statements assign are still read once they are gone: in the reader
        outside `into`, after the reader, or anywhere else in a loop around them. A name the
        reader assigns again (Megatron's `context = context.view(*output_size)`) is the
        reader's own from there on."""
        chain = set().union(*map(_assigned, removed))
        function = self.ctx.facts.functions[-1]
        targets, rebound = _rebinding(reader)
        in_reader = {id(n) for n in subtree(reader)} - {id(n) for n in subtree(into)} - targets
        gone = {id(n) for statement in removed for n in subtree(statement)} | {id(n) for n in subtree(into)}
        gone |= targets
        if not any(
            isinstance(n, cst.Name) and n.value in chain and id(n) not in gone for n in subtree(function)
        ):
            return None  # no name of the chain is left to read (most blocks): no walk in order
        looped = any(isinstance(node, cst.For | cst.While) for node in _path_to(function, reader))
        for node, path, past_reader in _names_in_order(function, reader):
            if node.value not in chain or id(node) in gone:
                continue
            if node.value in rebound and id(node) not in in_reader:
                continue
            if id(node) in in_reader or past_reader or looped:
                where = "there" if id(node) in in_reader else "after it"
                line = next((n for n in reversed(path) if isinstance(n, cst.SimpleStatementLine)), node)
                return Hold(
                    READ_ELSEWHERE,
                    f"`{node.value}`, which these statements compute, is read {where} "
                    f"(`{code_of(line, self.ctx.module)}`): the fused code does not compute it",
                )
        return None

    def compose(self, updated: cst.CSTNode, applied: Sequence[Candidate]) -> Fixed:
        """The block without the removed statements, each reader fixed; a guarded edit puts the
        fixed reader under `if <guard> is None:` and the statements as they were (with other
        fixes' edits) under its `else`."""
        edits = [self._edits[id(c)] for c in applied]
        block = cast(cst.IndentedBlock, updated)
        removing = {id(s): edit for edit in edits for s in edit.removed}
        readers = {id(edit.reader): edit for edit in edits}
        kept: dict[int, list[cst.BaseStatement]] = {}  # id(edit) -> its statements, for the `else`
        body: list[cst.BaseStatement] = []
        for original, statement in zip(edits[0].body, block.body, strict=True):
            if (edit := removing.get(id(original))) is not None:
                kept.setdefault(id(edit), []).append(statement)
                continue
            edit = readers.get(id(original))
            if edit is not None:
                if edit.guard is None:
                    comments = [line for line in _leading(original) if line.comment is not None]
                    heading = [*_leading(edit.removed[0]), *comments]
                    statement = edit.reader_fixed.with_changes(leading_lines=heading)
                else:
                    statement = _guarded_block(edit, [*kept[id(edit)], statement])
            body.append(statement)
        return block.with_changes(body=body)


def _guarded_block(edit: _Edit, original: list[cst.BaseStatement]) -> cst.If:
    """`if <guard> is None: <fixed reader>` `else: <the statements and reader as they were>`;
    the lines above the first statement go above the `if`."""
    assert edit.guard is not None
    fused = edit.reader_fixed.with_changes(leading_lines=())
    first, *rest = original
    unfused = [first.with_changes(leading_lines=()), *rest]
    return cst.If(
        guard_passes(edit.guard),
        cst.IndentedBlock([fused]),
        orelse=cst.Else(cst.IndentedBlock(unfused)),
        leading_lines=_leading(first),
    )


def _rebinding(reader: cst.BaseStatement) -> tuple[set[int], set[str]]:
    """The target names of a reader that is one plain assignment (their nodes, their names):
    what they held before it is not read after it."""
    line = _matchable(reader)
    if not isinstance(line, cst.Assign | cst.AnnAssign) or getattr(line, "value", None) is None:
        return set(), set()
    targets = [t.target for t in line.targets] if isinstance(line, cst.Assign) else [line.target]
    names = [
        n
        for target in targets
        for n in (
            [e.value for e in target.elements] if isinstance(target, cst.Tuple | cst.List) else [target]
        )
        if isinstance(n, cst.Name)
    ]
    return {id(n) for n in names}, {n.value for n in names}


def _leading(statement: cst.BaseStatement) -> Sequence[cst.EmptyLine]:
    """The blank and comment lines above a statement."""
    return cast(Sequence[cst.EmptyLine], getattr(statement, "leading_lines", ()))


def _may_run(steps: list[_Step], into: list[Pattern], block: list[ast.stmt]) -> bool:
    """Whether the steps may match a run of the block's statements (as the stdlib parser read
    them: Pattern.stdlib_test), followed by a reader that holds what `into` matches: a
    necessary test, an optional step tried both taken and skipped."""

    @functools.cache  # an optional step tried both ways meets the same (step, statement) again
    def run(step: int, at: int) -> bool:
        if step == len(steps):
            return at < len(block) and any(p.stdlib_test(n) for n in ast.walk(block[at]) for p in into)
        optional, of_test, alternatives = steps[step]
        taken = at < len(block) and _may_take(of_test, alternatives, block[at])
        return (taken and run(step + 1, at + 1)) or (optional and run(step + 1, at))

    return any(run(0, start) for start in range(len(block)))


def _may_take(of_test: bool, alternatives: list[Pattern], statement: ast.stmt) -> bool:
    """Whether a step may match the statement (an `if_test` step: the test of an `if`)."""
    if of_test:
        node: ast.AST | None = statement.test if isinstance(statement, ast.If) else None
    else:
        node = statement
    return node is not None and any(p.stdlib_test(node) for p in alternatives)


def _matchable(statement: cst.BaseStatement) -> cst.CSTNode | None:
    """What a step pattern is matched against: a line's one small statement, or a compound
    statement whole."""
    if isinstance(statement, cst.SimpleStatementLine):
        return statement.body[0] if len(statement.body) == 1 else None
    return statement


def _assigned(statement: cst.CSTNode) -> set[str]:
    """The plain names a statement (or any statement inside it) assigns."""
    return set().union(*map(assigned_names, subtree(statement)))


def _names_in_order(
    tree: cst.CSTNode, mark: cst.CSTNode
) -> Iterator[tuple[cst.Name, list[cst.CSTNode], bool]]:
    """The names the code reads or binds, in source order, each with the nodes around it and
    whether `mark` is behind it (attribute names and keyword names aside: they name no
    variable). One walk with a stack of the open nodes."""
    path: list[cst.CSTNode] = []
    passed = False
    pending: list[tuple[cst.CSTNode, bool]] = [(tree, False)]  # (node, whether it is being left)
    while pending:
        node, leaving = pending.pop()
        if leaving:
            path.pop()
            passed = passed or node is mark
            continue
        if isinstance(node, cst.Name):
            yield node, path, passed
        path.append(node)
        pending.append((node, True))
        skipped = (
            node.attr
            if isinstance(node, cst.Attribute)
            else node.keyword
            if isinstance(node, cst.Arg)
            else None
        )
        pending += [(child, False) for child in reversed(children(node)) if child is not skipped]


def _path_to(tree: cst.CSTNode, target: cst.CSTNode) -> list[cst.CSTNode]:
    """The nodes from `tree` down to `target` (empty when it is not inside)."""
    if tree is target:
        return [tree]
    for child in children(tree):
        path = _path_to(child, target)
        if path:
            return [tree, *path]
    return []


# A step compiled: whether it is optional, whether it matches an `if`'s test, its patterns.
_Step = tuple[bool, bool, list[Pattern]]


class StatementsKind(Kind[StatementsMatch]):
    key = "statements"
    schema = StatementsMatch
    matcher_type = StatementsMatcher
    fixes = frozenset({"template"})

    def __init__(self, rules: Iterable[Rule]) -> None:
        super().__init__(rules)
        self.compiled: list[tuple[Rule, StatementsMatch, list[_Step], list[Pattern]]] = [
            (
                rule,
                match,
                [(s.optional, s.if_test is not None, s.alternatives) for s in match.statements],
                _into(match),
            )
            for rule, match in self.entries
        ]

    @staticmethod
    def refuses(match: StatementsMatch, fixes: bool) -> str | None:
        if fixes and any(step.if_test for step in match.statements):
            return "an if_test step steps over a branch that a fix would drop: report rules only"
        return None

    @staticmethod
    def bindable(match: StatementsMatch) -> set[str]:
        return set(METAVARIABLE.findall(" ".join(_sources(match))))

    @staticmethod
    def keys(match: StatementsMatch) -> set[str]:
        """Statement runs compete with each other only: keyed by their first step."""
        return {"statements:" + "|".join(p.source for p in match.statements[0].alternatives)}

    def need(self, prefilter: Prefilter) -> None:
        """The words every alternative of each required step (and of `into`) spells."""
        for _, match in self.entries:
            required = [step.alternatives for step in match.statements if not step.optional] + [_into(match)]
            words = set().union(*(set.intersection(*(set(p.words) for p in ps)) for ps in required))
            prefilter.need(frozenset(words))

    def anchor(self, anchors: Anchors) -> None:
        """Each required step spells the first anchor of one of its alternatives; the matches
        need their whole function (the data flow is read there), where a block in it may hold
        the run (_may_run)."""
        for _, match, steps, into in self.compiled:
            choices: list[list[Token]] = []
            for step in match.statements:
                firsts = [p.anchors()[:1] for p in step.alternatives]
                if not step.optional and all(firsts):
                    choices.append([token for first in firsts for token in first[0]])
            anchors.rule(*choices, function=True, block=functools.partial(_may_run, steps, into))
