"""A fused operator's shape guard, proven from the function's code or the fix is held: each
input's rank (engine.ranks) and, for attention, that the last axis is the head split's
(engine.axes)."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

import libcst as cst

from npu_migrate.engine.axes import head_dim_held
from npu_migrate.engine.patterns import code_of
from npu_migrate.engine.ranks import Ranks
from npu_migrate.engine.reasons import OPERATOR_LIMIT_UNPROVEN
from npu_migrate.model import Hold

if TYPE_CHECKING:
    from npu_migrate.engine.context import FileContext


def held_for_shape(
    ctx: FileContext,
    wanted: dict[str, int | list[int]],
    values: dict[str, cst.BaseExpression],
    head_dim: Collection[str] = (),
) -> Hold | None:
    """The shape guard of a call or pattern match where the walk is: its function and line, with
    the whole file to follow parameters to their calls (such rules' anchors ask for it)."""
    functions = ctx.facts.functions
    function = functions[-1] if functions else None
    return unproven_shape(function, ctx.facts.line, wanted, values, ctx.module, ctx.module, head_dim)


def unproven_shape(
    function: cst.FunctionDef | None,
    at: cst.CSTNode | None,
    wanted: dict[str, int | list[int]],
    values: dict[str, cst.BaseExpression],
    module: cst.Module,
    callers: cst.Module | None = None,
    head_dim: Collection[str] = (),
) -> Hold | None:
    """Why a fused operator's shape limits are not proven for these values at statement `at` of
    `function` (a rule's `rank:` and `head_dim:` guards); None when every value has a wanted
    rank and no head dim is shown wrong. Outside a function, or with no statement to ask at,
    no rank is proven; `callers`: the whole file, where a parameter's rank is what the calls of
    its function pass."""
    ranks = Ranks(function, at, callers) if function is not None and at is not None else None
    for name, ranks_allowed in wanted.items():
        allowed = ranks_allowed if isinstance(ranks_allowed, list) else [ranks_allowed]
        if name not in values:
            continue  # not passed: the operator's own default, nothing to prove
        node = values[name]
        found = ranks.of(node) if ranks is not None else None
        if found not in allowed:
            seen = f"it is {found}-D" if found is not None else "its rank is not seen"
            dims = " or ".join(f"{n}-D" for n in allowed)
            code = code_of(node, module)
            return Hold(
                OPERATOR_LIMIT_UNPROVEN,
                f"the code does not show `{code}` is {dims}, as the fused operator needs ({seen})",
            )
    return head_dim_held(ranks, head_dim, values, module) if ranks is not None else None
