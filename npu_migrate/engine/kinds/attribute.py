"""`attribute:` rules: an attribute read on any receiver (`t.is_cuda`), renamed in place. A read
is not called (a call is a method, the `method:` kind's business) and not inside a dotted chain
from an imported name (`torch.cuda` in `torch.cuda.synchronize` is a name rule's business). An
attribute the file's code binds itself (`self.is_cuda = ...`, a class attribute, a method, as
the program model knows) is the code's own: engine.program_holds holds its fix."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import libcst as cst
from pydantic import Field

from npu_migrate.engine.fixes import renamed_attribute
from npu_migrate.engine.kinds.base import Candidate, Kind, Matcher, by_name
from npu_migrate.engine.kinds.fields import PlainNames, Strict
from npu_migrate.engine.regions import Anchors, Token
from npu_migrate.prefilter import Prefilter, accessed

if TYPE_CHECKING:
    from npu_migrate.engine.context import FileContext
    from npu_migrate.rules.schema import Rule


NOT_CALLED = r"(?![ \t]*\()"


class AttributeMatch(Strict):
    attribute: PlainNames = Field(description="Attribute names read on any receiver, e.g. 'is_cuda'.")


class AttributeMatcher(Matcher):
    kind: AttributeKind

    def __init__(self, ctx: FileContext, kind: AttributeKind) -> None:
        super().__init__(ctx, kind)
        self.callees: set[cst.CSTNode] = set()

    def visit_Call(self, node: cst.Call) -> None:
        self.callees.add(node.func)

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> list[Candidate]:
        rules = self.kind.by_name.get(updated.attr.value, ())
        if not rules or original in self.callees or self._inside_imported_name(original):
            return []
        name = updated.attr.value
        return [Candidate(r, renamed_attribute(r, updated), part=f".{name}", attribute=name) for r in rules]

    def _inside_imported_name(self, node: cst.Attribute) -> bool:
        if self.ctx.facts.is_reference(node):
            return False  # the whole of its chain, or no chain at all
        root: cst.BaseExpression = node
        while isinstance(root, cst.Attribute):
            root = root.value
        return isinstance(root, cst.Name) and root.value in self.ctx.table.bindings


class AttributeKind(Kind[AttributeMatch]):
    key = "attribute"
    schema = AttributeMatch
    matcher_type = AttributeMatcher
    fixes = frozenset({"rename"})

    def __init__(self, rules: Sequence[Rule]) -> None:
        super().__init__(rules)
        self.by_name = by_name((rule, name) for rule, match in self.entries for name in match.attribute)

    @staticmethod
    def keys(match: AttributeMatch) -> set[str]:
        return {f"attribute:{name}" for name in match.attribute}

    def need(self, prefilter: Prefilter) -> None:
        for name in self.by_name:
            prefilter.need(frozenset([accessed(name)]))

    def anchor(self, anchors: Anchors) -> None:
        """The attribute's name, not called (a call is a method)."""
        for _, match in self.entries:
            anchors.rule([Token.word(name, NOT_CALLED) for name in match.attribute])
