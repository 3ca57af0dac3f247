"""C++ and CUDA sources: the operators they register (pybind11's `m.def` and classes in
PYBIND11_MODULE, torch's TORCH_LIBRARY `m.def` and TORCH_LIBRARY_IMPL's CUDA `m.impl`) and the
`__global__` kernels they launch, found by their macros in the source with its comments blanked.
Nothing is rewritten: each operator needs an Ascend C custom operator or a torch fallback, a
human's decision. operator_links.py joins them to their builds and callers across the run."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from npu_migrate.engine.sites import Site, match_sites
from npu_migrate.model import NO_MODULE, Applicability, FileResult, ModulePath

if TYPE_CHECKING:
    from npu_migrate.engine.index import RuleIndex

# A string or comment left open runs to its line's (the file's) end: scanned once, not from every quote.
_COMMENT_OR_STRING = re.compile(rb'//[^\n]*|/\*.*?(?:\*/|\Z)|"(?:\\.|[^"\\\n])*"?', re.DOTALL)
_PYBIND = re.compile(rb"PYBIND11_MODULE\s*\(\s*(\w+)\s*,\s*(\w+)\s*\)")
_LIBRARY = re.compile(rb"TORCH_LIBRARY(?:_FRAGMENT)?\s*\(\s*(\w+)\s*,\s*(\w+)\s*\)")
_LIBRARY_IMPL = re.compile(rb"TORCH_LIBRARY_IMPL\s*\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*\)")
# The last word before the first `(` after `__global__` (template arguments between): one way to
# read the spaces between, where three quantifiers over them took cubic time.
_KERNEL = re.compile(rb"__global__\b[^;{()]*?(\w+)\s*(?:<[^;{()]*>\s*)?\(")
_LAUNCH_BOUNDS = re.compile(rb"__launch_bounds__\s*\([^()]*(?:\([^()]*\)[^()]*)*\)")
_CUDA_MARKS = re.compile(
    rb"#\s*include\s*[<\"](cuda|cublas|cudnn|ATen/cuda/|c10/cuda/|thrust/)|<<<|\bcudaStream_t\b|__global__"
)
TORCH_EXTENSION_NAME = "TORCH_EXTENSION_NAME"


@dataclass(frozen=True)
class Registration:
    """An operator a source registers: `name` as Python or torch.ops reach it."""

    name: str  # `fused_gelu`; a torch library's `ns::fused_gelu`
    start: int  # bytes of the name in the file
    end: int
    module: str  # pybind11: the module macro's argument (TORCH_EXTENSION_NAME: the build's name)
    namespace: str  # torch library: its namespace
    how: str  # "pybind11", "library" or a dispatch key's implementation ("CUDA implementation")


def migrate_native(
    data: bytes, index: RuleIndex, enabled: frozenset[Applicability], where: ModulePath = NO_MODULE
) -> FileResult:
    sites = [
        Site(
            "operator",
            r.start,
            r.end,
            r.name,
            {"CUDA": "yes" if cuda_code(r, None, data) else "no"},
        )
        for r in registrations(data)
    ]
    sites += [Site("kernel", start, end, name) for start, end, name in _kernels(data)]
    matched = match_sites(data, sorted(sites, key=lambda s: s.start), index, enabled, {"native"})
    return FileResult(findings=matched.findings, overridden=matched.overridden)


def cuda_code(registration: Registration, path: Path | None, data: bytes) -> bool:
    """Whether an operator is CUDA code as its own file shows: a CUDA source, a CUDA
    implementation, or a source that includes CUDA headers, defines or launches kernels (the
    file's name where known: a handler sees only its bytes)."""
    if (path and path.suffix in (".cu", ".cuh")) or registration.how == "CUDA implementation":
        return True
    return bool(_CUDA_MARKS.search(_blanked(data)))


def _blanked(data: bytes) -> bytes:
    """The source with comments blanked and string literals kept (operators are named in them)."""

    def blank(match: re.Match[bytes]) -> bytes:
        text = match[0]
        return text if text.startswith(b'"') else re.sub(rb"[^\n]", b" ", text)

    return _COMMENT_OR_STRING.sub(blank, data)


def registrations(data: bytes) -> list[Registration]:
    """Each `<m>.def("name" ...)` / `<m>.impl("name" ...)` (and pybind11's `py::class_<...>(<m>,
    "Name")`) after the macro that binds `<m>`, up to the next such macro."""
    code = _blanked(data)
    macros = sorted(
        [(m.start(), m[2], m[1].decode(), "", "pybind11") for m in _PYBIND.finditer(code)]
        + [(m.start(), m[2], "", m[1].decode(), "library") for m in _LIBRARY.finditer(code)]
        + [
            (m.start(), m[3], "", m[1].decode(), f"{m[2].decode()} implementation")
            for m in _LIBRARY_IMPL.finditer(code)
        ]
    )
    found = []
    for number, (start, variable, module, namespace, how) in enumerate(macros):
        end = macros[number + 1][0] if number + 1 < len(macros) else len(code)
        method = rb"impl" if how.endswith("implementation") else rb"def"
        call = rb"\b" + re.escape(variable) + rb"\s*\.\s*" + method + rb'\s*\(\s*"([\w.]+)'
        if how == "pybind11":  # a bound class is reached like a function: module.Name(...)
            call += rb"|py::class_\s*<[^;]*?>\s*\(\s*" + re.escape(variable) + rb'\s*,\s*"(\w+)'
        for defined in re.compile(call).finditer(code, start, end):
            group = 1 if defined[1] is not None else 2
            name = defined[group].decode()
            found.append(
                Registration(
                    f"{namespace}::{name}" if namespace else name,
                    defined.start(group),
                    defined.end(group),
                    module,
                    namespace,
                    how,
                )
            )
    return found


def _kernels(data: bytes) -> Iterator[tuple[int, int, str]]:
    code = _LAUNCH_BOUNDS.sub(lambda m: b" " * len(m[0]), _blanked(data))  # not the kernel's name
    for kernel in _KERNEL.finditer(code):  # from `__global__` (its line) to the name
        yield kernel.start(), kernel.end(1), kernel[1].decode()
