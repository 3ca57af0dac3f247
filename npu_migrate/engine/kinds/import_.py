"""`import:` rules: imports of a module (`import cupy`, `from flash_attn import ...`), or of
any module whose name has a form (`import my_kernels_cuda`: a compiled CUDA extension), reported
where the import stands."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import libcst as cst
from pydantic import Field

from npu_migrate.engine.kinds.base import Candidate, Kind, Matcher
from npu_migrate.engine.kinds.fields import QualifiedNames, Regex, Strict
from npu_migrate.engine.names import NameTable, module_name
from npu_migrate.engine.regex import compile_rule_regex
from npu_migrate.engine.regions import Anchors, Token
from npu_migrate.prefilter import Prefilter, components

if TYPE_CHECKING:
    from npu_migrate.rules.schema import Rule


class ModuleForm(Strict):
    """Any module whose name has a form: how a kind of module is named, not one module."""

    named: Regex = Field(
        description=r"A regex the last component of the module's name must match whole (`\w+_cuda\w*`)."
    )
    containing: str = Field(
        min_length=2,
        description="Text every such name holds (`_cuda`), by which the files that may import one "
        "are found without reading them.",
    )


class ImportMatch(Strict):
    import_: QualifiedNames | ModuleForm = Field(
        alias="import",
        description="Imported modules ('pkg.*' also matches its submodules), or the form of their "
        "names (a compiled CUDA extension's `<op>_cuda`).",
    )


class ImportMatcher(Matcher):
    kind: ImportKind

    def _report(self, module: str, by_name: bool = True, by_form: bool = True) -> list[Candidate]:
        found = self.kind.table.rules_for(module) if by_name else []
        last = module.rsplit(".", 1)[-1]
        found += [(rule, 0) for rule, form in self.kind.forms if by_form and form.fullmatch(last)]
        return [Candidate(rule, None, part=module, specificity=s) for rule, s in found]

    def leave_Import(self, original: cst.Import, updated: cst.Import) -> list[Candidate]:
        return [c for alias in updated.names for c in self._report(module_name(alias.name))]

    def leave_ImportFrom(self, original: cst.ImportFrom, updated: cst.ImportFrom) -> list[Candidate]:
        """The module imported from; where no rule is about it, each module imported from it
        (`from torch import cuda` imports torch.cuda). A name's form counts only where what is
        imported is a package's module (`from . import roi_align_cuda`): `from transformers.utils
        import is_torch_cuda_available` imports a function."""
        module = self.ctx.table.imported_from(updated)
        modules = updated.module is None and not isinstance(updated.names, cst.ImportStar)
        if module is None:  # relative, where the package is not known: the forms still show
            named = module_name(updated.module) if updated.module is not None else None
            if named is not None:
                return self._report(named, by_name=False)
            names = [module_name(alias.name) for alias in updated.names] if modules else []  # type: ignore[union-attr]
            return [c for name in names for c in self._report(name, by_name=False)]
        found = self._report(module)
        if found or isinstance(updated.names, cst.ImportStar):
            return found
        return [
            c
            for alias in updated.names
            for c in self._report(f"{module}.{module_name(alias.name)}", by_form=modules)
        ]


class ImportKind(Kind[ImportMatch]):
    key = "import"
    schema = ImportMatch
    matcher_type = ImportMatcher

    def __init__(self, rules: Sequence[Rule]) -> None:
        super().__init__(rules)
        names = [(rule, m.import_) for rule, m in self.entries if not isinstance(m.import_, ModuleForm)]
        self.table = NameTable.of((rule, name) for rule, listed in names for name in listed)
        self.forms = [
            (rule, compile_rule_regex(m.import_.named))
            for rule, m in self.entries
            if isinstance(m.import_, ModuleForm)
        ]

    @staticmethod
    def keys(match: ImportMatch) -> set[str]:
        if isinstance(match.import_, ModuleForm):
            return {f"import~{match.import_.named}"}
        return {f"import:{name}" for name in match.import_}

    def need(self, prefilter: Prefilter) -> None:
        for _, match in self.entries:
            if isinstance(match.import_, ModuleForm):
                prefilter.need_fragment(match.import_.containing)
                continue
            for name in match.import_:
                prefilter.need(components(name))

    def anchor(self, anchors: Anchors) -> None:
        """An import statement spells every component of what it imports (`from torch import
        cuda` too): the last is the rarest (`cuda` is, `torch` is on most lines); a module named
        by its form spells the text its form holds."""
        for _, match in self.entries:
            if isinstance(match.import_, ModuleForm):
                anchors.rule([Token.fragment(match.import_.containing)])
            else:
                anchors.rule([Token.word(name.removesuffix(".*").split(".")[-1]) for name in match.import_])
