"""The one pass: a libcst transformer that knows no rule and no match kind. It runs the facts'
hooks, then every kind's hooks for the node; on the way up it settles the kinds' candidates by
rule precedence and puts the winning fix in place, unless engine.holds holds it back."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import cast

import libcst as cst

from npu_migrate.engine.context import FileContext
from npu_migrate.engine.holds import ZONE_TYPES, NpuZones
from npu_migrate.engine.kinds.base import Candidate, Hoist, LeaveHook, Matcher, VisitHook, hooks_of
from npu_migrate.model import Hold

Block = cst.IndentedBlock | cst.Module
BLOCK_TYPES = frozenset({cst.IndentedBlock, cst.Module})


class Transformer(cst.CSTTransformer):
    def __init__(self, ctx: FileContext, matchers: Sequence[Matcher]) -> None:
        super().__init__()
        self.ctx = ctx
        facts_visits, facts_leaves = hooks_of(ctx.facts)
        self.visits: dict[type, list[VisitHook]] = defaultdict(list)
        self.fact_leaves: dict[type, Callable[[cst.CSTNode], object]] = dict(facts_leaves)  # type: ignore[arg-type]
        self.leaves: dict[type, list[tuple[Matcher, LeaveHook]]] = defaultdict(list)
        for node_type, hook in facts_visits.items():
            self.visits[node_type].append(hook)
        for matcher in matchers:
            visits, leaves = matcher.hooks()
            for node_type, hook in visits.items():
                self.visits[node_type].append(hook)
            for node_type, leave in leaves.items():
                self.leaves[node_type].append((matcher, leave))
        self.zones: list[tuple[cst.CSTNode, Hold]] = []  # the outermost code that handles the NPU
        self.npu_zones = NpuZones()
        # An earlier line -> the hoists (by name) that applied fixes put before it.
        self.hoists: dict[cst.CSTNode, dict[str, Hoist]] = {}

    # libcst asks about every field of every node; no hook here looks at fields.
    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        pass

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        pass

    def on_visit(self, node: cst.CSTNode) -> bool:
        """Every hook sees the node; any of them may keep the walk out of its children."""
        if type(node) in ZONE_TYPES and not self.zones:
            why = self.npu_zones.why(node)
            if why is not None:
                self.zones.append((node, why))
        descend = True
        for hook in self.visits.get(type(node), ()):
            if hook(node) is False:
                descend = False
        return descend

    def on_leave(  # type: ignore[override]  # libcst's signature ties both nodes to one type
        self, original_node: cst.CSTNode, updated_node: cst.CSTNode
    ) -> cst.CSTNode | cst.FlattenSentinel[cst.CSTNode]:
        kind = type(original_node)
        fact = self.fact_leaves.get(kind)
        if fact is not None:
            fact(original_node)
        leaves = self.leaves.get(kind)
        result = self._settle(original_node, updated_node, leaves) if leaves else updated_node
        if self.hoists and kind in BLOCK_TYPES:
            result = self._place_hoists(original_node, result)  # type: ignore[arg-type]
        if self.zones and self.zones[-1][0] is original_node:
            self.zones.pop()
        return result

    def _place_hoists(self, original: Block, updated: Block) -> Block:
        """Put `name = <code>` before each line of this block that an applied fix hoists from
        (PatternMatch.hoist); the line then reads the name. The line itself is as it was (no
        other fix applies in it), so it is found by its content."""
        body = list(updated.body)
        for line in original.body:
            hoists = self.hoists.pop(line, None)
            if hoists is None:
                continue
            at = next(i for i, statement in enumerate(body) if statement.deep_equals(line))
            reading = next(iter(hoists.values())).line  # `line`, as the SimpleStatementLine it is
            named = [
                cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(h.name))], h.target)])
                for h in hoists.values()
            ]
            named[0] = named[0].with_changes(leading_lines=reading.leading_lines)
            for hoist in hoists.values():
                reading = cast(
                    cst.SimpleStatementLine, reading.deep_replace(hoist.target, cst.Name(hoist.name))
                )
            body[at : at + 1] = [*named, reading.with_changes(leading_lines=())]
        if isinstance(original, cst.Module) and self.hoists:
            raise RuntimeError("a hoisted value found no line to go before")  # the file is left as it is
        return updated.with_changes(body=body)

    def _settle(
        self, original_node: cst.CSTNode, updated_node: cst.CSTNode, leaves: list[tuple[Matcher, LeaveHook]]
    ) -> cst.CSTNode | cst.FlattenSentinel[cst.CSTNode]:
        owners: dict[int, Matcher] = {}
        candidates: list[Candidate] = []
        for matcher, leave in leaves:
            for candidate in leave(original_node, updated_node):
                owners[id(candidate)] = matcher
                candidates.append(candidate)
        if not candidates:
            return updated_node
        if not all(c.rule.last_resort for c in candidates):
            candidates = [c for c in candidates if not c.rule.last_resort]
        winners = self.ctx.beaten_from_inside(original_node, self.ctx.settle(candidates))
        if not winners:
            return updated_node
        zone = self.zones[-1][1] if self.zones else None
        where = {id(w): w.at[0] if w.at else original_node for w in winners}  # what each is about
        suppressed = {id(w): self.ctx.suppression(where[id(w)], w.rule.code) for w in winners}
        holds = {
            id(w): suppressed[id(w)] or zone or w.held or self.ctx.hold(where[id(w)], w.rule) for w in winners
        }
        applied = [w for w in winners if not holds[id(w)] and self.ctx.enabled_for(w)]
        owner = owners[id(applied[0])] if applied else None
        applied = [w for w in applied if owners[id(w)] is owner]  # one kind edits a node
        for winner in applied:
            for hoist in winner.hoists:
                self.hoists.setdefault(hoist.line, {})[hoist.name] = hoist
        self.ctx.drop_beaten_inside(original_node, winners)
        for winner in winners:
            self.ctx.record(
                where[id(winner)], winner, winner in applied, holds[id(winner)], bool(suppressed[id(winner)])
            )
        if not owner:
            return updated_node
        composed = owner.compose(updated_node, applied)
        if any(w.rule.fix and w.rule.fix.template for w in applied) and isinstance(composed, cst.CSTNode):
            self.ctx.forget_replaced(original_node, composed)
        return composed
