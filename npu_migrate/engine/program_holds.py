"""The holds the program model decides, after the pass has found every match, so that migrated
code is never worse than unmigrated code:

* a file that already keeps a path for the NPU beside CUDA: every fix is held (rewritten for the
  NPU, its GPU path would break);
* a file that is the CUDA member of a family of per-device modules (`accelerators/cuda.py` beside
  cpu.py and mps.py, and its tests' `test_cuda.py`): every fix is held; it is the GPU path, the
  family picks it by its own CUDA checks, and rewritten it would be chosen on an NPU host while
  the checks it shares with the callers still expect CUDA;
* an attribute the code binds itself (`self.is_cuda = ...`): the code's own, not the tensor's;
  neither a CUDA test nor CUDA code;
* a comparison with a value left CUDA (`torch_device == "cuda"` where `torch_device` keeps its
  "cuda"), and a probe asked to equal a name imported from another file
  (`torch.cuda.is_available() == CUDA_IS_AVAILABLE`): rewritten, neither would hold where it did;
* a guard over code left CUDA: a fix that rewrites what a guard tests is held back when the code
  the guard decides on keeps CUDA-only code (a manual finding, a fix the run does not make, a
  call into a compiled extension). Rewritten, the test would lead an NPU run into that code,
  which was dead and harmless before the migration. Every form of guard counts (`if`, `while`,
  `and`/`or`, `not`, a conditional expression, a loop's bound, an early exit, an `assert`, a
  test-skipping decorator), and a test is followed to the values it reads that ask about CUDA
  (`has_gpu = torch.cuda.is_available()`, `self.use_cuda`, a helper's return) or that are bound
  only where such a question said so (`if torch.cuda.is_available(): self._off = not enabled`,
  then another method's `if self._off: return` before CUDA code left). CUDA code that
  runs only where a CUDA-only package imported (under `if FLASH_ATTN_3_AVAILABLE:`, set by the
  `try` that imports flash_attn_interface) does not count: no NPU host reaches it;
* a fix inside an expression a rule reports for a human to rewrite whole (Rule.rewritten_whole:
  `torch.cuda.get_device_properties(0).major`): renamed alone it would still fail there;
* a value handed on by keyword to code that another file of the run keeps comparing with CUDA
  (a test's `torch.device("cuda", i)` cases given as `DDPStrategy(parallel_devices=...)`, while
  Lightning's connector keeps `strategy.parallel_devices[0].type == "cuda"`, since Lightning has
  no NPU accelerator): rewritten, the value would no longer meet that comparison;
* a fix whose code works only on data on the NPU (Rule.needs_npu_data: the fused optimizers) in
  a function whose device its caller chooses (`def test_step(device):`, a test's fixture, which
  may be the CPU), or whose data the file is not seen moving to an accelerator (`model.cuda()`,
  `model.to("cuda")`): rewritten, the code would fail there, where it ran before."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from npu_migrate.engine.holds import cuda_member, dual_path
from npu_migrate.engine.program.model import Comparison, Guard, Key, Program, Value
from npu_migrate.engine.program.spans import Span
from npu_migrate.engine.reasons import (
    COMPARED_ACROSS_FILES,
    COMPARED_WITH_CUDA,
    DATA_DEVICE_UNSEEN,
    DEVICE_FROM_CALLER,
    GUARDS_CUDA,
    HANDED_TO_CUDA_TEST,
    OPERATOR_LIMIT_UNPROVEN,
    OWN_ATTRIBUTE,
    PART_OF_A_REPORT,
    STATE_LEFT_ON_CUDA,
    VALUE_GUARDS_CUDA,
)
from npu_migrate.model import Hold

STAYS = "which stays CUDA code: migrate that first"


@dataclass(frozen=True)
class Site:
    """A match, where the program model can see it."""

    span: Span
    code: str
    rule: str
    fixes: bool  # the run fixes it (for a scan: a default apply would)
    has_fix: bool  # its rule has a fix for it (made or not by this run)
    leaves: bool  # it stays CUDA code that fails on an NPU
    severe: bool  # held back, it would stay such code (not a note, not harmless on an NPU)
    probe: bool  # its value asks about CUDA, falsy without it (Rule.probes)
    attribute: str | None  # the attribute it reads, which the code may bind itself
    needs_npu_data: str | None = None  # why its fix works only on data on the NPU (Rule.needs_npu_data)
    rewritten_whole: bool = False  # a human rewrites what it matched as a whole (Rule.rewritten_whole)
    instance_of: tuple[tuple[str, tuple[str, ...]], ...] = ()  # attributes that must hold these classes only
    state: str | None = None  # the device state it reads or writes (Rule.states)


def program_holds(sites: Sequence[Site], program: Program) -> dict[int, Hold]:
    """The sites whose fix must be held back, with why (by index into `sites`)."""
    whole = dual_path(program.dual_path) if program.dual_path is not None else None
    if whole is None and program.cuda_member_beside:
        whole = cuda_member(program.cuda_member_beside)
    if whole is not None:  # the file stays as it is: every fix is held, for one reason
        return {i: whole for i, s in enumerate(sites) if s.has_fix}
    held: dict[int, Hold] = {}
    own = [s.attribute is not None and s.attribute in program.bound_attributes for s in sites]
    for i, site in enumerate(sites):
        if own[i] and site.fixes and site.attribute is not None:
            line = program.bound_attributes[site.attribute]
            held[i] = Hold(
                OWN_ATTRIBUTE,
                f"the code binds `.{site.attribute}` itself (line {line}): it is the code's own attribute, "
                "not the tensor's, and renaming some of its uses would break the others",
            )
    for i, site in enumerate(sites):
        why = _instance_unseen(site, program)
        if why and site.has_fix and i not in held:
            held[i] = Hold(OPERATOR_LIMIT_UNPROVEN, why)
    fixes = [s.fixes and not own[i] and i not in held for i, s in enumerate(sites)]
    leaves = [s.leaves and not own[i] for i, s in enumerate(sites)]
    inside = _locator(sites)
    for i, hold in _part_of_reports(sites, inside, fixes).items():
        held[i], fixes[i] = hold, False
    placed = _handed_holds(sites, program, inside, fixes) | _device_holds(sites, program, inside, fixes)
    for i, hold in placed.items():
        held[i], fixes[i], leaves[i] = hold, False, sites[i].severe
    compared = _comparison_holds(sites, program, inside, fixes, leaves)
    for i in compared:
        fixes[i], leaves[i] = False, sites[i].severe
    held |= compared | _guard_holds(sites, program, inside, fixes, leaves)
    return held | _state_holds(sites, program, inside, fixes, leaves)


def _state_holds(
    sites: Sequence[Site],
    program: Program,
    inside: Callable[[Span], list[int]],
    fixes: Sequence[bool],
    leaves: Sequence[bool],
) -> dict[int, Hold]:
    """One device state, one device: where a use of a state stays CUDA in the file (left, or
    fixed in the body of an `if` whose CUDA test stays, which an NPU run never enters) while a
    fix would move another use to the NPU, the fixes of its uses are held. Megatron's RNG tracker
    with its getter moved to the NPU and its setter queued on CUDA restored nothing and said
    nothing."""
    stated = [(i, site.state) for i, site in enumerate(sites) if site.state]
    if not stated:
        return {}
    dead = [
        (guard.guarded[0], f"under `{guard.header}` (line {guard.test.line})")
        for guard in program.guards
        if guard.branches
        and any(sites[i].probe and not fixes[i] for i in _asked_alone(guard.test, inside, sites))
    ]
    kept: dict[str, str] = {}  # a state -> the use that keeps it on CUDA
    moved: set[str] = set()  # the states a fix moves to the NPU where an NPU run gets to it
    for i, state in stated:
        site = sites[i]
        code = f"`{site.code.splitlines()[0]}`"
        under = next((where for span, where in dead if span.holds(site.span)), None)
        if leaves[i] and not fixes[i]:
            kept.setdefault(state, f"{code} ({site.rule}, line {site.span.line})")
        elif fixes[i] and under is not None:
            kept.setdefault(state, f"{code} {under}")
        elif fixes[i]:
            moved.add(state)
    kept = {state: why for state, why in kept.items() if state in moved}  # else nothing is split
    return {
        i: Hold(
            STATE_LEFT_ON_CUDA,
            f"{kept[state]} keeps the {state} state on CUDA: moved alone, this would split that state "
            "between two devices (migrate that first)",
        )
        for i, state in stated
        if fixes[i] and state in kept
    }


def _asked_alone(test: Span, inside: Callable[[Span], list[int]], sites: Sequence[Site]) -> list[int]:
    """The sites a test is a bare call of (`torch.cuda.is_available()`): where one stays CUDA, the
    test is false on an NPU host, and the branch it opens never runs there."""

    def called(span: Span) -> Span:  # the span of `name()` on the name's line
        return Span(span.start, (span.end[0], span.end[1] + 2))

    return [i for i in inside(test) if called(sites[i].span) == test]


def _part_of_reports(
    sites: Sequence[Site], inside: Callable[[Span], list[int]], fixes: Sequence[bool]
) -> dict[int, Hold]:
    """Fixes strictly inside code that a rule leaves for a human to rewrite whole."""
    held: dict[int, Hold] = {}
    for report in sites:
        if not report.rewritten_whole:
            continue
        for i in inside(report.span):
            if fixes[i] and report.span != sites[i].span and i not in held:
                held[i] = Hold(
                    PART_OF_A_REPORT,
                    f"it is part of `{report.code.splitlines()[0]}` ({report.rule}), which a human rewrites "
                    "whole: renamed alone, it would still fail there",
                )
    return held


def _instance_unseen(site: Site, program: Program) -> str | None:
    """Why the file does not show an attribute the fix calls bound to the classes it must be
    (`self.attn_drop = nn.Dropout(p)` and nothing else), or None."""
    for attribute, classes in site.instance_of:
        callees = program.attribute_callees.get(attribute, set())
        wanted = {name.rsplit(".", 1)[-1] for name in classes}
        if not callees or any(c is None or c.rsplit(".", 1)[-1] not in wanted for c in callees):
            bound = (
                ", ".join(sorted(c or "a value that is not a call" for c in callees))
                or "nothing this file shows"
            )
            needed = " or ".join(classes)
            return f"the fused code needs `.{attribute}` to be a {needed}; the file binds it to {bound}"
    return None


def _device_holds(
    sites: Sequence[Site], program: Program, inside: Callable[[Span], list[int]], fixes: Sequence[bool]
) -> dict[int, Hold]:
    """Fixes that need their data on the NPU, inside a function whose device is its caller's, or
    where the data is not seen going to an accelerator (a LightningModule's optimizer: the
    trainer places the parameters, on the CPU when told so)."""
    held: dict[int, Hold] = {}
    for function in program.device_parameters:
        for i in inside(function.body):
            why = sites[i].needs_npu_data
            if why and fixes[i] and i not in held:
                held[i] = Hold(
                    DEVICE_FROM_CALLER,
                    f"its data is on the device `{function.parameter}` that the caller of line "
                    f"{function.line} chooses, which may be the CPU, and {why}",
                )
    for i, site in enumerate(sites):
        reads = program.data_of.get(site.span.start, frozenset())
        if site.needs_npu_data and fixes[i] and i not in held and not program.on_accelerator(reads):
            held[i] = Hold(
                DATA_DEVICE_UNSEEN,
                "this file does not show its data moved to an accelerator (by `.cuda()`, `.npu()`, or "
                f"`.to()` a CUDA or NPU device), so it may be on the CPU, and {site.needs_npu_data}",
            )
    return held


def _handed_holds(
    sites: Sequence[Site], program: Program, inside: Callable[[Span], list[int]], fixes: Sequence[bool]
) -> dict[int, Hold]:
    """Fixes in a value handed on as a keyword that another file keeps comparing with CUDA,
    directly (`parallel_devices=[torch.device("cuda", 0)]`) or through the values the argument
    reads (a variable, a test's parametrized case)."""
    held: dict[int, Hold] = {}
    for handed in program.handed:
        where = program.compared_elsewhere.get(handed.keyword)
        if where is None:
            continue
        why = Hold(
            HANDED_TO_CUDA_TEST,
            f"its value is handed on as `{handed.keyword}=` (line {handed.span.line}), and {where} keeps "
            "comparing it with CUDA: rewritten, it would no longer meet that comparison",
        )
        spans = [handed.span, *(value.span for value in _values_read(program, handed.reads))]
        held |= {i: why for span in spans for i in inside(span) if fixes[i] and i not in held}
    return held


def _locator(sites: Sequence[Site]) -> Callable[[Span], list[int]]:
    """The sites (their indexes) inside a span, found by bisection over the sites' starts."""
    order = sorted(range(len(sites)), key=lambda i: sites[i].span.start)
    starts = [sites[i].span.start for i in order]

    def inside(span: Span) -> list[int]:
        first = bisect.bisect_left(starts, span.start)
        last = bisect.bisect_left(starts, span.end)
        return [order[k] for k in range(first, last) if span.holds(sites[order[k]].span)]

    return inside


def _comparison_holds(
    sites: Sequence[Site],
    program: Program,
    inside: Callable[[Span], list[int]],
    fixes: list[bool],
    leaves: list[bool],
) -> dict[int, Hold]:
    """`torch_device == "cuda"` where `torch_device = os.environ.get(..., "cuda")` keeps its
    "cuda" (held, or left for a human): rewritten, the comparison would never hold where it did."""
    held: dict[int, Hold] = {}
    for comparison in program.comparisons:
        fixed = [i for i in inside(comparison.span) if fixes[i]]
        if not fixed:
            continue
        values = _values_read(program, comparison.reads)
        left = next((i for value in values for i in inside(value.span) if leaves[i]), None)
        if left is not None:
            why = (
                f"it is compared in `{comparison.text}` with a value that stays CUDA "
                f"(`{sites[left].code.splitlines()[0]}` ({sites[left].rule}), line {sites[left].span.line}): "
                "rewritten, the comparison would no longer hold where it did"
            )
            held |= {i: Hold(COMPARED_WITH_CUDA, why) for i in fixed}
            continue
        probes = [i for i in fixed if sites[i].probe]
        outside = _imported_read(program, comparison, values) if comparison.equality and probes else None
        if outside is not None:
            name, module = outside
            why = (
                f"`{comparison.text}` asks that it equal `{name}`, which comes from `{module}`: what that "
                "value means (CUDA's answer, most often) is decided in another file, so the rewritten "
                "probe could no longer equal it where it did"
            )
            held |= {i: Hold(COMPARED_ACROSS_FILES, why) for i in probes}
    return held


def _imported_read(
    program: Program, comparison: Comparison, values: Sequence[Value]
) -> tuple[str, str] | None:
    """A name the comparison reads (itself or through `values`, those its operands read here)
    that the file imports from another module, with that module; None when every operand is the
    file's own."""
    keys = set(comparison.reads) | {k for v in values for k in v.reads}
    for key in sorted(keys, key=str):
        if key in program.imported and key not in program.values:
            return str(key[2]), program.imported[key]
    return None


def _values_read(program: Program, keys: frozenset[Key]) -> list[Value]:
    """The values bound to what `keys` name, and to what those read, and so on, in file order
    (the walk's own order follows sets', which changes from run to run with the hash seed)."""
    found: list[Value] = []

    def step(value: Value) -> bool:
        found.append(value)
        return True

    _walk(program, keys, step)
    return sorted(found, key=lambda value: value.span.start)


def _walk(program: Program, keys: frozenset[Key], step: Callable[[Value], bool]) -> None:
    """Visit the values bound to what `keys` name, once each; `step(value)` says whether to go on
    into the values it reads."""
    seen: set[Key] = set()
    todo = list(keys)
    while todo:
        key = todo.pop()
        if key in seen:
            continue
        seen.add(key)
        for value in program.values.get(key, ()):
            if step(value):
                todo.extend(value.reads)


def _behind_cuda_imports(
    program: Program, inside: Callable[[Span], list[int]], leaves: Sequence[bool]
) -> Callable[[Span], bool]:
    """Whether code runs only where a CUDA-only package imported: under a flag that a `try`
    sets once an import that stays CUDA code (a site left) succeeded."""
    flags = {
        flag
        for flag, imports in program.availability.items()
        if any(leaves[i] for span in imports for i in inside(span))
    }
    spans = [span for span, names in program.requires if names & flags]
    return lambda site: any(span.holds(site) for span in spans)


def _guard_holds(
    sites: Sequence[Site],
    program: Program,
    inside: Callable[[Span], list[int]],
    fixes: list[bool],
    leaves: list[bool],
) -> dict[int, Hold]:
    if not any(fixes) or not program.guards:
        return {}
    natives = sorted(program.native_calls, key=lambda c: c.span.start)
    native_starts = [c.span.start for c in natives]
    unreached = _behind_cuda_imports(program, inside, leaves)
    branching = [guard for guard in program.guards if guard.branches]
    asking = [(guard, [i for i in inside(guard.test) if sites[i].probe]) for guard in branching]
    asking = [(guard, probes) for guard, probes in asking if probes]

    def decided_by(span: Span) -> list[int]:
        """The fixed probes of the `if`s whose branch holds `span` (a value bound there)."""
        return [
            i
            for guard, probes in asking
            if any(g.holds(span) for g in guard.guarded)
            for i in probes
            if fixes[i]
        ]

    def left_behind(guard: Guard) -> str | None:
        for span in guard.guarded:
            site = next((i for i in inside(span) if leaves[i] and not unreached(sites[i].span)), None)
            if site is not None:
                return f"`{sites[site].code.splitlines()[0]}` ({sites[site].rule})"
            at = bisect.bisect_left(native_starts, span.start)
            if at < len(natives) and span.holds(natives[at].span):
                return f"`{natives[at].code}`, a call into a compiled extension"
        return None

    def fixed_sources(keys: frozenset[Key]) -> list[int]:
        """The fixed sites in the values a test reads that ask about CUDA (a comparison, a probe),
        followed through the values they read until a value that its own sites keep as it was
        (an atom, `not`, `and`)."""
        found: list[int] = []

        def step(value: Value) -> bool:
            found.extend(decided_by(value.span))  # bound only where a probe said so
            there = inside(value.span)
            if there and not value.question and not any(sites[i].probe for i in there):
                return False  # data (`model.cuda()`), not a question: what reads it was not dead before
            found.extend(i for i in there if fixes[i])
            return not (value.conjunctive and keeps(value.span))

        _walk(program, keys, step)
        return found

    def keeps(span: Span) -> bool:
        """Whether code with one of its atoms kept as CUDA (held now, or left) is as it was."""
        return any(fixes[i] or leaves[i] for i in inside(span))

    def value_left(keys: frozenset[Key], verb: str) -> str | None:
        """A value `keys` read (or the values those read) that stays CUDA: the test's
        (`torch_device = os.environ.get(..., "cuda")`, which the guarded code uses as CUDA) or
        the guarded code's (`cuda_devices = ["cuda", 0]` read under `if
        torch.cuda.is_available():`); rewritten, the test would lead an NPU run to it."""
        for value in _values_read(program, keys):
            site = next((i for i in inside(value.span) if leaves[i]), None)
            if site is not None:
                code, rule, line = sites[site].code.splitlines()[0], sites[site].rule, sites[site].span.line
                return f"code that {verb} `{code}` ({rule}, line {line})"
        return None

    held: dict[int, Hold] = {}
    changed = True
    while changed:
        changed = False
        for guard in program.guards:
            direct = [i for i in inside(guard.test) if fixes[i]]
            via = [] if guard.conjunctive and keeps(guard.test) else fixed_sources(guard.reads)
            if not direct and not via:
                continue
            left = left_behind(guard) or value_left(guard.reads, "uses") or value_left(guard.uses, "reads")
            if left is None:
                continue
            through = f"its value reaches `{guard.header}` (line {guard.test.line}), which guards {left}"
            reasons = [(i, Hold(GUARDS_CUDA, f"it guards {left}, {STAYS}")) for i in direct]
            reasons += [(i, Hold(VALUE_GUARDS_CUDA, f"{through}, {STAYS}")) for i in via]
            for i, why in reasons:
                if fixes[i]:
                    fixes[i], leaves[i], held[i] = False, sites[i].severe, why
                    changed = True
    return held
