"""Custom operators across the run: each operator a C++/CUDA source registers (native.py) joined
to the extension that builds it (a literal CUDAExtension, CppExtension or cpp_extension.load in
Python), decided CUDA or C++ code, and linked to the Python and notebook code that calls it."""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from npu_migrate.discover import kind_of
from npu_migrate.engine.names import ImportTable
from npu_migrate.engine.regions import byte_span, byte_starts
from npu_migrate.engine.sites import Lines, Site, match_sites
from npu_migrate.engine.suppressions import Suppressions
from npu_migrate.handlers.native import TORCH_EXTENSION_NAME, Registration, cuda_code, registrations
from npu_migrate.model import FileOutcome, Finding, ModulePath

if TYPE_CHECKING:
    from npu_migrate.engine.index import RuleIndex

_BUILDERS = ("CUDAExtension", "CppExtension", "load", "load_inline")


@dataclass(frozen=True)
class _Operator:
    registration: Registration
    file: str  # where it is registered, as reports name the file
    line: int
    module: str  # the Python module pybind11 builds ("" for a torch library's or an unknown build)
    cuda: bool  # CUDA code: see cuda_code, or a build with .cu sources


@dataclass(frozen=True)
class _Target:
    """An extension a Python file builds: its name, and whether any of its sources is CUDA."""

    name: str
    cuda: bool


def link_operators(outcomes: list[FileOutcome], index: RuleIndex) -> list[FileOutcome]:
    """Each operator's finding says which extension builds it (a .cpp file built with .cu
    sources, or beside them where the build cannot be read, is CUDA code) and where Python calls
    it; each call gets a finding of its own, saying where the operator is registered."""
    natives = [o for o in outcomes if kind_of(o.file) == "native" and o.file.data and o.result.findings]
    targets = _build_targets(outcomes)
    cuda_folders = {o.file.path.parent for o in outcomes if o.file.path.suffix in (".cu", ".cuh")}
    operators = []
    for outcome in natives:
        data = outcome.file.data
        assert data is not None
        lines = Lines(data)
        target = targets.get(outcome.file.path.resolve()) or targets.get(Path(outcome.file.path.name))
        for registration in registrations(data):
            module = registration.module
            if module == TORCH_EXTENSION_NAME:
                module = target.name if target else ""
            built_with_cuda = target.cuda if target else outcome.file.path.parent in cuda_folders
            cuda = cuda_code(registration, outcome.file.path, data) or built_with_cuda
            line = lines.point(registration.start)[0]
            operators.append(_Operator(registration, outcome.file.display, line, module, cuda))
    calls: dict[_Operator, list[str]] = {op: [] for op in operators}
    linked = []
    for outcome in outcomes:
        new, suppressions = _call_findings(outcome, operators, index)
        for operator, finding in new:
            cell = f"cell {finding.cell}:" if finding.cell else ""
            calls[operator].append(f"{outcome.file.display}:{cell}{finding.line}")
        if suppressions is not None:
            result = outcome.result
            used = {s.line for s in suppressions.used}
            outcome = FileOutcome(
                outcome.file,
                replace(
                    result,
                    findings=sorted(result.findings + [f for _, f in new], key=_order),
                    suppressed=result.suppressed + suppressions.hits,
                    unused_suppressions=[n for n in result.unused_suppressions if n not in used],
                ),
            )
        linked.append(outcome)
    return [_described(o, operators, calls, index) if o in natives else o for o in linked]


def _call_findings(
    outcome: FileOutcome, operators: Sequence[_Operator], index: RuleIndex
) -> tuple[list[tuple[_Operator, Finding]], Suppressions | None]:
    """The findings of a Python file's (or a notebook's) calls to the operators, and the file's
    suppression comments as they stand after them."""
    kind, data = kind_of(outcome.file), outcome.file.data
    if data is None or kind not in ("python", "setup.py", "notebook"):
        return [], None
    relocate: Callable[[Finding], Finding] = lambda finding: finding  # noqa: E731
    if kind == "notebook":
        from npu_migrate.handlers.notebook import python_of

        module = python_of(data)
        if module is None:
            return [], None
        data, relocate = module
    found = _calls(data, outcome.file.module, operators)
    if not found:
        return [], None
    lines = Lines(data)
    at = {(lines.point(start)[0], op.registration.name): op for op, start, _ in found}
    sites = [
        Site(
            "operator call",
            start,
            end,
            op.registration.name,
            {"CUDA": "yes" if op.cuda else "no"},
            detail=f"registered in {op.file}:{op.line}",
        )
        for op, start, end in found
    ]
    # a Python file's suppression comments hold for these findings too (a notebook's: not yet)
    suppressions = Suppressions.of(data) if kind != "notebook" else Suppressions([])
    findings = match_sites(data, sites, index, frozenset(), {"native"}, lines, suppressions).findings
    return [(at[f.line, f.code], relocate(f)) for f in findings], suppressions


def _order(finding: Finding) -> tuple[int, int, str]:
    return finding.line, finding.column, finding.rule.code


def _described(
    outcome: FileOutcome, operators: Sequence[_Operator], calls: dict[_Operator, list[str]], index: RuleIndex
) -> FileOutcome:
    """The registrations' findings again, now that what builds each operator (and so whether it
    is CUDA code) and who calls it are known; the kernels' findings as they were."""
    data = outcome.file.data
    assert data is not None
    here = [op for op in operators if op.file == outcome.file.display]
    sites = []
    for operator in here:
        if operator.module:
            built = f"built as `{operator.module}`"
        elif operator.registration.namespace:
            built = f"in torch.ops.{operator.registration.namespace}"
        else:
            built = "built by an extension npu-migrate cannot name (no literal CUDAExtension or load)"
        called = calls[operator]
        said = f"called from {', '.join(called)}" if called else "no Python call found in the scanned files"
        registration = operator.registration
        facts = {"CUDA": "yes" if operator.cuda else "no"}
        sites.append(
            Site(
                "operator",
                registration.start,
                registration.end,
                registration.name,
                facts,
                detail=f"{built}; {said}",
            )
        )
    lines = Lines(data)
    registered = {(lines.point(op.registration.start)[0], op.registration.name) for op in here}
    kept = [f for f in outcome.result.findings if (f.line, f.code) not in registered]
    new = match_sites(data, sites, index, frozenset(), {"native"}, lines).findings
    return FileOutcome(outcome.file, replace(outcome.result, findings=sorted(kept + new, key=_order)))


def _build_targets(outcomes: list[FileOutcome]) -> dict[Path, _Target]:
    """Source file -> the extension that compiles it (setup.py's CUDAExtension,
    cpp_extension.load): by its path from the Python file's folder, and by its bare name."""
    targets: dict[Path, _Target] = {}
    for outcome in outcomes:
        data = outcome.file.data
        if (
            not data
            or kind_of(outcome.file) not in ("python", "setup.py")
            or (b"Extension" not in data and b"load" not in data)
        ):
            continue
        try:
            tree = ast.parse(data)
        except (SyntaxError, ValueError):
            continue
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
            if name not in _BUILDERS:
                continue
            given = {k.arg: k.value for k in call.keywords if k.arg}
            target = given.get("name", call.args[0] if call.args else None)
            sources = _strings(given.get("sources", call.args[1] if len(call.args) > 1 else None))
            if not (isinstance(target, ast.Constant) and isinstance(target.value, str)):
                continue
            built = _Target(target.value, name == "CUDAExtension" or any(s.endswith(".cu") for s in sources))
            for source in sources:
                targets[(outcome.file.path.parent / source).resolve()] = built
                targets.setdefault(Path(Path(source).name), built)
    return targets


def _strings(node: ast.expr | None) -> list[str]:
    if isinstance(node, (ast.List, ast.Tuple)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _calls(
    data: bytes, module: ModulePath, operators: Sequence[_Operator]
) -> list[tuple[_Operator, int, int]]:
    """Where Python code calls the operators: `<module>.name(...)` through the module's import
    (any alias, relative imports resolved), a name imported from it, or `torch.ops.ns.name`."""
    wanted = [op for op in operators if op.registration.name.split("::")[-1].encode() in data]
    if not wanted:
        return []
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return []
    table = ImportTable.of_ast(tree, module)
    starts = byte_starts(data)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        reached = _reached(node.func, table)
        for operator in wanted:
            if reached == _reach(operator):
                found.append((operator, *byte_span(node.func, starts)))
    return found


def _reach(operator: _Operator) -> str:
    """What Python calls to reach the operator: `module.name` or `torch.ops.ns.name`."""
    registration = operator.registration
    if registration.namespace:
        return f"torch.ops.{registration.namespace}.{registration.name.split('::')[-1]}"
    return f"{operator.module}.{registration.name}"


def _reached(func: ast.expr, table: ImportTable) -> str | None:
    """The qualified name a call's function spells through the file's imports (`_C.fused_gelu`
    -> `fastops._C.fused_gelu`; a `.default` overload of a torch.ops operator is the operator)."""
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return None
    dotted = table.qualify([func.id, *reversed(parts)])
    return dotted.removesuffix(".default") if dotted and dotted.startswith("torch.ops.") else dotted
