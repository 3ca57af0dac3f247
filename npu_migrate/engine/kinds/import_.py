"""`import:` rules: imports of a module (`import cupy`, `from flash_attn import ...`), reported
where the import stands."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import libcst as cst
from pydantic import Field

from npu_migrate.engine.kinds.base import Candidate, Kind, Matcher
from npu_migrate.engine.kinds.fields import QualifiedNames, Strict
from npu_migrate.engine.names import NameTable, module_name
from npu_migrate.engine.regions import Anchors, Token
from npu_migrate.prefilter import Prefilter, components

if TYPE_CHECKING:
    from npu_migrate.rules.schema import Rule


class ImportMatch(Strict):
    import_: QualifiedNames = Field(
        alias="import", description="Imported modules; 'pkg.*' also matches its submodules."
    )


class ImportMatcher(Matcher):
    kind: ImportKind

    def _report(self, module: str) -> list[Candidate]:
        return [
            Candidate(rule, None, part=module, specificity=s) for rule, s in self.kind.table.rules_for(module)
        ]

    def leave_Import(self, original: cst.Import, updated: cst.Import) -> list[Candidate]:
        return [c for alias in updated.names for c in self._report(module_name(alias.name))]

    def leave_ImportFrom(self, original: cst.ImportFrom, updated: cst.ImportFrom) -> list[Candidate]:
        """The module imported from; where no rule is about it, each module imported from it
        (`from torch import cuda` imports torch.cuda)."""
        module = self.ctx.table.imported_from(updated)
        if module is None:
            return []
        found = self._report(module)
        if found or isinstance(updated.names, cst.ImportStar):
            return found
        return [c for alias in updated.names for c in self._report(f"{module}.{module_name(alias.name)}")]


class ImportKind(Kind[ImportMatch]):
    key = "import"
    schema = ImportMatch
    matcher_type = ImportMatcher

    def __init__(self, rules: Sequence[Rule]) -> None:
        super().__init__(rules)
        self.table = NameTable.of((rule, name) for rule, match in self.entries for name in match.import_)

    @staticmethod
    def keys(match: ImportMatch) -> set[str]:
        return {f"import:{name}" for name in match.import_}

    def need(self, prefilter: Prefilter) -> None:
        for _, match in self.entries:
            for name in match.import_:
                prefilter.need(components(name))

    def anchor(self, anchors: Anchors) -> None:
        """An import statement spells every component of what it imports (`from torch import
        cuda` too): the last is the rarest (`cuda` is, `torch` is on most lines)."""
        for _, match in self.entries:
            anchors.rule([Token.word(name.removesuffix(".*").split(".")[-1]) for name in match.import_])
