"""Everything the one pass knows about one file: its tree, import table and import plan, the
fixes enabled for the run, what it has matched so far and the imports its fixes need. Match
kinds read and write this object, never each other."""

from __future__ import annotations

import ast
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cmp_to_key
from typing import TYPE_CHECKING

import libcst as cst
from libcst.metadata import CodeRange

from npu_migrate.engine.facts import Facts
from npu_migrate.engine.holds import subtree
from npu_migrate.engine.imports import ImportPlan
from npu_migrate.engine.names import ImportTable, dotted_parts, name_matches
from npu_migrate.engine.precedence import compare
from npu_migrate.engine.program.spans import Span
from npu_migrate.engine.program_holds import Site
from npu_migrate.engine.reasons import FILE_WORDS, SUPPRESSED
from npu_migrate.engine.suppressions import Suppressions
from npu_migrate.model import Applicability, Finding, Hold, Severity

if TYPE_CHECKING:
    from npu_migrate.engine.kinds.base import Candidate, Fixed
    from npu_migrate.rules.schema import Fix, Rule


@dataclass(frozen=True)
class Match:
    """A finding before its position is known: positions cost a pass over the whole file, so
    they are computed once, afterwards, and only for files that have matches."""

    candidate: Candidate
    node: cst.CSTNode  # in the original tree
    code: str
    replacement: str | None
    applied: bool
    held: Hold | None = None  # why the rule's fix is held back here (engine.holds)
    suppressed: bool = False  # a suppression comment covers it: not reported, not fixed

    @property
    def nodes(self) -> tuple[cst.CSTNode, ...]:
        """The node, and the last statement of a match over several (Candidate.at)."""
        at = self.candidate.at
        return (self.node, at[1]) if at else (self.node,)

    def at(self, positions: Mapping[cst.CSTNode, CodeRange]) -> Finding:
        where, end = positions[self.node], positions[self.nodes[-1]]
        return Finding(
            rule=self.candidate.rule.info,
            line=where.start.line,
            column=where.start.column + 1,
            end_line=end.end.line,
            end_column=end.end.column + 1,
            code=self.code,
            replacement=self.replacement,
            applied=self.applied,
            held=self.held,
        )


class FileContext:
    def __init__(
        self,
        module: cst.Module,
        table: ImportTable,
        plan: ImportPlan,
        enabled: frozenset[Applicability],
        words: Collection[str] = (),
        suppressions: Suppressions | None = None,
        spans: Mapping[cst.CSTNode, CodeRange] | None = None,
        silenced: frozenset[str] = frozenset(),
        decided: Mapping[tuple[cst.CSTNode, str], Hold] | None = None,
        tree_of: Callable[[], ast.Module | None] = lambda: None,
    ) -> None:
        self.module = module
        # The stdlib parser's tree of the whole file (the module may hold only its regions), for
        # the rare match whose use is elsewhere in the file; None where Python cannot read it.
        self.tree_of = tree_of
        self.decided = decided or {}  # (node, rule code) -> why the program model holds its fix
        self.silenced = silenced
        self.suppressions = suppressions
        self.spans = spans or {}  # where each node is, where the file has suppressions
        self.words = words  # of the whole file (the module may hold only its regions)
        self.table = table
        self.plan = plan
        self.enabled = enabled
        # The fixes a hold assumes: a scan predicts what a default apply would do.
        self.planned = enabled or frozenset({Applicability.safe})
        self.facts = Facts()
        self.matches: list[Match] = []
        self.overridden: list[str] = []  # codes of catalog rules a user rule beat on some node
        self.rewritten: cst.Module = module  # the module with the enabled fixes, after the pass
        self.positions: Mapping[cst.CSTNode, CodeRange] = {}  # of the matches and imports, after it

    def code(self, node: cst.CSTNode) -> str:
        return _code(self.module, node)

    def enabled_for(self, candidate: Candidate) -> bool:
        return candidate.fixed is not None and candidate.rule.applicability in self.enabled

    def settle(self, candidates: Sequence[Candidate]) -> list[Candidate]:
        """The winning candidate for each part of a node, best first, by rule precedence (a
        user rule beats the catalog, then declared `supersedes`, then the more specific name);
        catalog rules that lost to a user rule are counted as overridden."""
        by_part: dict[str, list[Candidate]] = {}
        for candidate in candidates:
            by_part.setdefault(candidate.part, []).append(candidate)
        winners = []
        for contenders in by_part.values():
            ranked = sorted(contenders, key=cmp_to_key(compare))
            beaten = next((c for c in ranked if c.rule.builtin), None)  # what would have won
            if not ranked[0].rule.builtin and beaten is not None:
                self.overridden.append(beaten.rule.code)
            winners.append(ranked[0])
        return sorted(winners, key=cmp_to_key(compare))

    def hold(self, node: cst.CSTNode, rule: Rule) -> Hold | None:
        """Why the code around `node` holds this rule's fix back (the program model decided it,
        engine.program_holds, or the file's words rule the fix out), or None."""
        return self.decided.get((node, rule.code)) or self.file_hold(rule)

    def hold_matches(self, holds: Mapping[tuple[cst.CSTNode, str], Hold]) -> None:
        """Hold the fixes of these matches (none of them applied)."""
        self.matches = [
            replace(m, held=held, replacement=None)
            if (held := holds.get((m.node, m.candidate.rule.code))) is not None
            else m
            for m in self.matches
        ]

    def sites(self, spans: Sequence[Span]) -> list[Site]:
        """The matches as engine.program_holds sees them, at `spans` (one per match, in the file)."""
        return [
            Site(span, m.code, m.candidate.rule.code, self._fixes(m), m.replacement is not None,
                 self._leaves_cuda(m), self._severe(m),
                 m.code.rsplit(".", 1)[-1] in m.candidate.rule.probes, m.candidate.attribute,
                 m.candidate.rule.needs_npu_data, m.candidate.rule.rewritten_whole, m.candidate.instance_of,
                 self._state_of(m))
            for m, span in zip(self.matches, spans, strict=True)
        ]  # fmt: skip

    def _state_of(self, match: Match) -> str | None:
        """The device state the matched name reads or writes (Rule.states); for a from-import
        (which carries the renames of its names' uses), that of a name it imports."""
        states = match.candidate.rule.states
        if not states:
            return None
        node = match.node
        names = [match.candidate.part]
        if isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar):
            base = self.table.imported_from(node)
            names = [f"{base}.{alias.evaluated_name}" for alias in node.names] if base else []
        return next((s for name in names for s, listed in states.items() if name_matches(name, listed)), None)

    def file_hold(self, rule: Rule) -> Hold | None:
        """Why the words of the file, or of another file of the run, hold this rule's fix back
        (Rule.hold_in_files_with), or None."""
        hold = rule.hold_in_files_with
        if hold is None:
            return None
        word = next((w for w in hold.words if w in self.words), None)
        if word:
            return Hold(FILE_WORDS, f"this file mentions {word}: {hold.why}")
        elsewhere = dict(self.table.where.words_elsewhere)
        word = next((w for w in hold.words if w in elsewhere), None)
        return Hold(FILE_WORDS, f"{elsewhere[word]} mentions {word}: {hold.why}") if word else None

    def forget_replaced(self, original: cst.CSTNode, replacement: cst.CSTNode) -> None:
        """A template replaced `original`: the findings inside it whose code the replacement no
        longer holds are gone with it (what a metavariable carried over is still there), the
        fixes inside it too where their result is not in it (the callee a name rule rewrote, in
        a call a call rule rewrote whole)."""
        inside = {id(n) for n in subtree(original)} - {id(original)}
        text = self.module.code_for_node(replacement)
        self.matches = [m for m in self.matches if id(m.node) not in inside or _carried(m, text)]

    def drop_unaccompanied(self) -> None:
        """Matches of rules that report only beside another rule's match (Rule.only_with), where
        the file has none."""
        present = {m.candidate.rule.code for m in self.matches}
        self.matches = [
            m
            for m in self.matches
            if not m.candidate.rule.only_with or present.intersection(m.candidate.rule.only_with)
        ]

    def suppression(self, node: cst.CSTNode, code: str) -> Hold | None:
        """Why a match of `code` on `node` is suppressed (the configuration, a comment), or None."""
        if code in self.silenced:
            return Hold(SUPPRESSED, "not selected by the configuration")
        if self.suppressions is None or node not in self.spans:
            return None
        where = self.spans[node]
        why = self.suppressions.reason(code, where.start.line, where.end.line)
        return Hold(SUPPRESSED, why) if why else None

    def drop_beaten_inside(self, outer: cst.CSTNode, winners: Sequence[Candidate]) -> None:
        """Forget the matches within `outer` whose rules its winners supersede and which changed
        nothing: a rule about a whole call beats a report on the name it calls (flash-attn's
        `flash_attn_func(...)` rewrite and the report on every flash-attn name), as a site's rule
        beats those of the sites within it (engine.sites)."""
        beaten = {code for w in winners for code in w.rule.supersedes}
        if not beaten or not any(m.candidate.rule.code in beaten for m in self.matches):
            return
        inside = {id(node) for node in subtree(outer)}
        self.matches = [
            m
            for m in self.matches
            if m.applied or m.candidate.rule.code not in beaten or id(m.node) not in inside
        ]

    def beaten_from_inside(self, outer: cst.CSTNode, winners: list[Candidate]) -> list[Candidate]:
        """The winners, less the reports on `outer` that a match within it supersedes: a rule
        about one module's name (`import fused_layer_norm_cuda`, NPU850) beats a report on any
        import of that form around it."""
        reports = {w.rule.code for w in winners if w.fixed is None}
        if not reports or not any(reports.intersection(m.candidate.rule.supersedes) for m in self.matches):
            return winners
        inside = {id(node) for node in subtree(outer)}
        beaten = {code for m in self.matches if id(m.node) in inside for code in m.candidate.rule.supersedes}
        return [w for w in winners if w.fixed is not None or w.rule.code not in beaten]

    def record(
        self, original: cst.CSTNode, candidate: Candidate, applied: bool, held: Hold | None, suppressed: bool
    ) -> None:
        """A match; `held`: why its fix, if it has one, is held back."""
        held = held if candidate.fixed is not None or suppressed else None
        self.matches.append(
            Match(
                candidate=candidate,
                node=original,
                code=self.code(original),
                replacement=None if held else _code_of_fixed(self.module, candidate.fixed),
                applied=applied,
                held=held,
                suppressed=suppressed,
            )
        )

    def bindings_to_keep(self) -> ImportPlan | None:
        """The plan again, where an imported local that a rename gives a new name must stay
        bound: some use of it keeps the old name (its fix is held, or not part of the run), or
        the file does not use it at all (it re-exports it). None when the plan stands."""
        plan = self.plan
        renamed = {local for local, p in plan.locals.items() if p.local != local} - plan.kept - plan.unused
        if not renamed:
            return None
        uses: dict[str, list[Match]] = {local: [] for local in renamed}
        for match in self.matches:
            parts = dotted_parts(match.node) if isinstance(match.node, cst.Name | cst.Attribute) else None
            if parts and parts[0] in uses:
                uses[parts[0]].append(match)
        unused = frozenset(local for local, found in uses.items() if not found)
        kept = frozenset(local for local, found in uses.items() if not all(map(self._fixes, found))) - unused
        if not unused and not kept:
            return None
        return replace(plan, kept=plan.kept | kept, unused=plan.unused | unused)

    def _fixes(self, match: Match) -> bool:
        """Whether the run fixes (or, for a scan, a default apply would fix) this match."""
        rule = match.candidate.rule
        return match.replacement is not None and rule.applicability in self.planned

    def _leaves_cuda(self, match: Match) -> bool:
        """Whether a match stays CUDA code that fails on an NPU after the run: held, or needing
        work that no fix of the run does (notes, and code harmless on an NPU, are no such work)."""
        return self._severe(match) and (bool(match.held) or not self._fixes(match))

    @staticmethod
    def _severe(match: Match) -> bool:
        """Whether the match, left as it is, fails on an NPU (not a note, not harmless there)."""
        rule = match.candidate.rule
        return rule.severity is not Severity.info and not rule.harmless_on_npu

    @property
    def needed_imports(self) -> list[str]:
        """The imports the applied fixes need, in the order they were first needed."""
        needed: list[str] = []
        for match in self.matches:
            if match.applied:
                fix = match.candidate.rule.fix
                needed += [n for n in [*(fix.add_import if fix else []), *match.candidate.imports]]
        return list(dict.fromkeys(needed))

    @property
    def _applied_fixes(self) -> list[Fix]:
        """The fixes of the matches the run applied, in the file's order."""
        return [m.candidate.rule.fix for m in self.matches if m.applied and m.candidate.rule.fix]

    @property
    def needed_helpers(self) -> dict[str, str]:
        """The helper functions the applied fixes call (Fix.helpers), by name."""
        return {name: code for fix in self._applied_fixes for name, code in fix.helpers.items()}

    @property
    def droppable_imports(self) -> set[str]:
        """The imports the applied fixes free, where nothing else uses them."""
        return {name for fix in self._applied_fixes for name in fix.drop_unused_imports}

    @property
    def droppable_checks(self) -> set[str]:
        """The checks for a CUDA package the applied fixes replace (Fix.drop_checks)."""
        return {name for fix in self._applied_fixes for name in fix.drop_checks}


def _carried(match: Match, text: str) -> bool:
    """Whether a replacement's code still holds a match from inside what it replaced: a fix's
    result, else the code the match reported."""
    return (match.replacement if match.applied and match.replacement else match.code) in text


def _code_of_fixed(module: cst.Module, fixed: Fixed | None) -> str | None:
    if isinstance(fixed, cst.FlattenSentinel):
        return "; ".join(_code(module, n) for n in fixed.nodes)
    return None if fixed is None else _code(module, fixed)


def _code(module: cst.Module, node: cst.CSTNode) -> str:
    """A node's code, without the comment lines above a statement."""
    if getattr(node, "leading_lines", None):
        node = node.with_changes(leading_lines=())
    return module.code_for_node(node).strip()
