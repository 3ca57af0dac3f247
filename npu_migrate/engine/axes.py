"""Which axis of a tensor is which, where the code spells it. A fused attention operator reads
the last axis of q, k and v as the head dim D (at most 768); channel attention (timm's XCiT)
permutes the token axis there instead, which a rank guard cannot tell from the head split. An
axis is known by the `view` or `reshape` that spelled its size; `permute` and `transpose` with
literal axes move it, casts, `contiguous` and `normalize` keep it, an integer index or
`unbind(0)` drops the first. Anything else is not seen: the limit is then the operator's to
check at run time (the emulation raises where torch_npu does)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import libcst as cst

from npu_migrate.engine.patterns import code_of
from npu_migrate.engine.ranks import KEEPS_RANK, Binding, Ranks, kept_from, number, spelled_sizes
from npu_migrate.engine.reasons import OPERATOR_LIMIT_UNPROVEN
from npu_migrate.model import Hold

MAX_HEAD_DIM = 768  # npu_fusion_attention's documented limit on D
_DEPTH = 12


@dataclass(frozen=True)
class Axis:
    """An axis as the code spelled it: its size as written, at `position` of the sizes the
    `view`/`reshape` call `made_by` spelled."""

    size: cst.BaseExpression
    position: int
    made_by: cst.Call


Shape = tuple[Axis, ...]


class Axes:
    """The axes of values in one function, asked at one statement of it (the bindings Ranks
    read)."""

    def __init__(self, ranks: Ranks) -> None:
        self.ranks = ranks

    def of(self, expression: cst.BaseExpression, depth: int = 0, before: int = 1 << 30) -> Shape | None:
        if depth > _DEPTH:
            return None
        if isinstance(expression, cst.Name):
            reaching = self.ranks.reaching(expression.value, before)
            shapes = {self._of_binding(b, depth + 1) for b in reaching} if reaching else {None}
            return shapes.pop() if len(shapes) == 1 else None
        if isinstance(expression, cst.BinaryOperation):
            sides = [s for s in (expression.left, expression.right) if not number(s)]
            return self.of(sides[0], depth + 1, before) if len(sides) == 1 else None
        if isinstance(expression, cst.Subscript):
            first = expression.slice[0].slice if len(expression.slice) == 1 else None
            if isinstance(first, cst.Index) and isinstance(first.value, cst.Integer):
                inner = self.of(expression.value, depth + 1, before)
                return inner[1:] if inner else None
            return None
        if not isinstance(expression, cst.Call):
            return None
        if (kept := kept_from(expression)) is not None:
            return self.of(kept, depth + 1, before)
        if isinstance(expression.func, cst.Attribute):
            return self._of_method(expression, expression.func, depth, before)
        return None

    def _of_method(self, call: cst.Call, func: cst.Attribute, depth: int, before: int) -> Shape | None:
        method = func.attr.value
        if method in ("view", "reshape"):
            sizes = spelled_sizes(call)
            return tuple(Axis(s, i, call) for i, s in enumerate(sizes)) if sizes else None
        receiver = self.of(func.value, depth + 1, before)
        if receiver is None:
            return None
        if method == "permute":
            order = _literal_axes(call, len(receiver))
            return tuple(receiver[i] for i in order) if order and len(order) == len(receiver) else None
        if method == "transpose":
            pair = _literal_axes(call, len(receiver))
            if not pair or len(pair) != 2:
                return None
            swapped = list(receiver)
            swapped[pair[0]], swapped[pair[1]] = receiver[pair[1]], receiver[pair[0]]
            return tuple(swapped)
        return receiver if method in KEEPS_RANK else None

    def _of_binding(self, binding: Binding, depth: int) -> Shape | None:
        value, before = binding.value, binding.order
        if value is None:
            return None
        if binding.index is None:
            return self.of(value, depth, before)
        if isinstance(value, cst.Tuple | cst.List):  # q, k, v = qkv[0], qkv[1], qkv[2]
            element = value.elements[binding.index] if binding.index < len(value.elements) else None
            return (
                None
                if element is None or isinstance(element, cst.StarredElement)
                else self.of(element.value, depth, before)
            )
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
            receiver = self.of(value.func.value, depth, before)
            if (
                receiver
                and value.func.attr.value == "unbind"
                and _literal_axes(value, len(receiver)) in ([0], [])
            ):
                return receiver[1:]
        return None


def _literal_axes(call: cst.Call, rank: int) -> list[int] | None:
    """The axes a call names by literal integers (negative ones counted from the end)."""
    axes = []
    for arg in call.args:
        value = arg.value
        negative = isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus)
        number = value.expression if negative and isinstance(value, cst.UnaryOperation) else value
        if arg.star or (arg.keyword and arg.keyword.value not in ("dim", "dims", "dim0", "dim1")):
            return None
        if not isinstance(number, cst.Integer):
            return None
        axis = -int(number.value) if negative else int(number.value)
        if not -rank <= axis < rank:
            return None
        axes.append(axis % rank)
    return axes


def head_dim_held(
    ranks: Ranks, names: Collection[str], values: dict[str, cst.BaseExpression], module: cst.Module
) -> Hold | None:
    """Why these (B, N, S, D) attention inputs' last axis is not the head dim: the head dim is
    split from the channels with the head count before it (`(B, S, H, D)`, `(B, 3, H, D, S)`),
    so a size the shape spelled before the head count (the batch, the tokens) moved last is not
    it (channel attention); or a head dim spelled over 768."""
    axes = Axes(ranks)
    for name in names:
        shape = axes.of(values[name]) if name in values else None
        if not shape or len(shape) != 4:
            continue
        heads, last, code = shape[1], shape[-1], code_of(values[name], module)
        size = code_of(last.size, module)
        if heads.made_by is last.made_by and last.position < heads.position:
            return Hold(
                OPERATOR_LIMIT_UNPROVEN,
                f"the fused operator reads `{code}` as (B, N, S, D), with D at most {MAX_HEAD_DIM}; the "
                f"code puts `{size}` last, a size spelled before the head count "
                f"`{code_of(heads.size, module)}`, not the head dim split from the channels (channel "
                "attention)",
            )
        if isinstance(last.size, cst.Integer) and int(last.size.value) > MAX_HEAD_DIM:
            return Hold(
                OPERATOR_LIMIT_UNPROVEN,
                f"`{code}`'s head dim is {size}, over the fused operator's {MAX_HEAD_DIM}",
            )
    return None
