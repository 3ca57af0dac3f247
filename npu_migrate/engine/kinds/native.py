"""Match kinds of custom CUDA operators (npu_migrate/native.py finds them): `custom_operator`,
an operator a C++ or CUDA source registers with Python or with torch (`m.def("name", ...)` in
PYBIND11_MODULE or TORCH_LIBRARY, a CUDA implementation in TORCH_LIBRARY_IMPL), and the Python
code that calls it; `cuda_kernel`, a `__global__` function of a CUDA source."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pydantic import Field

from npu_migrate.engine.kinds.fields import Regex, Strict
from npu_migrate.engine.kinds.site import SiteKind, full_match

if TYPE_CHECKING:
    from npu_migrate.engine.sites import Site


class CustomOperatorMatch(Strict):
    custom_operator: Regex = Field(
        description="Regex the operator's whole name must match (`fused_gelu`; a torch library's "
        "operator as `namespace::name`): where a source registers it, and where Python calls it."
    )
    cuda: bool = Field(
        default=True,
        description="Operators of CUDA code (a .cu source, a CUDA implementation, CUDA headers or "
        "kernels in its source, a build with .cu sources); false: of C++ code without CUDA.",
    )


class CudaKernelMatch(Strict):
    cuda_kernel: Regex = Field(description="Regex the `__global__` function's whole name must match.")


class CustomOperatorKind(SiteKind):
    key = "custom_operator"
    schema = CustomOperatorMatch
    content: ClassVar[str] = "native"

    @staticmethod
    def keys(match: CustomOperatorMatch) -> set[str]:
        return {f"custom_operator:{match.custom_operator}:{match.cuda}"}

    @staticmethod
    def hit(match: CustomOperatorMatch, site: Site) -> bool:
        if site.kind not in ("operator", "operator call") or (site.facts.get("CUDA") == "yes") != match.cuda:
            return False
        return full_match(match.custom_operator, site.text)


class CudaKernelKind(SiteKind):
    key = "cuda_kernel"
    schema = CudaKernelMatch
    content: ClassVar[str] = "native"

    @staticmethod
    def keys(match: CudaKernelMatch) -> set[str]:
        return {f"cuda_kernel:{match.cuda_kernel}"}

    @staticmethod
    def hit(match: CudaKernelMatch, site: Site) -> bool:
        return site.kind == "kernel" and full_match(match.cuda_kernel, site.text)
