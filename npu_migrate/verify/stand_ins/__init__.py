"""Plain-torch stand-ins for the CUDA-only libraries a model's original code imports (flash-attn,
FlashAttention 3, xformers, apex, Transformer Engine), so that `verify` can run the original as
the reference where those libraries cannot run: as the emulation stands in for torch_npu on the
migrated side. Each follows its library's documented semantics, release by release where its
API changed (`versions`), and raises where the library refuses its inputs. They load on the
original side only: first where the original runs without CUDA, else after the real libraries
(which win where installed). `site/` holds the packages, named as the libraries are."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from npu_migrate.verify.stand_ins import versions

SITE = Path(__file__).parent / "site"


@dataclass(frozen=True)
class Library:
    module: str  # its top-level import name
    name: str  # as it is installed (pip)
    release: str  # the release stood in for unless asked otherwise
    covers: str  # what the stand-in has, in words


LIBRARIES = {
    library.module: library
    for library in (
        Library(
            "flash_attn",
            "flash-attn",
            "2.8.3",
            "flash_attn_func and its kvpacked, qkvpacked and varlen forms, _flash_attn_forward, "
            "bert_padding, layers.rotary.apply_rotary_emb",
        ),
        Library(
            "flash_attn_interface",
            "flash-attn 3 (hopper)",
            "3.0.0b1",
            "flash_attn_func, flash_attn_varlen_func, flash_attn_qkvpacked_func",
        ),
        Library(
            "xformers",
            "xformers",
            "0.0.29",
            "ops.memory_efficient_attention and the attn_bias types (causal, block-diagonal, local, "
            "tensor biases)",
        ),
        Library(
            "apex",
            "apex",
            "0.1",
            "normalization (FusedLayerNorm, FusedRMSNorm, MixedFused*), optimizers (FusedAdam, FusedSGD; "
            "not FusedLAMB)",
        ),
        Library(
            "transformer_engine",
            "transformer-engine",
            "2.4",
            "pytorch Linear, GroupedLinear, LayerNorm, RMSNorm, LayerNormLinear, LayerNormMLP, "
            "DotProductAttention, distributed's RNG tracker and checkpoint; fp8_autocast computes in "
            "the input's dtype (FP8 is not emulated)",
        ),
    )
}


class StandInError(ValueError):
    """A --stand-in value that names no stand-in or no release."""


def choose(asked: Sequence[str]) -> dict[str, str]:
    """The stand-ins and releases asked for (`MODULE` or `NAME`, optionally `==RELEASE`; `none`
    for none); every library at its default release where nothing is asked."""
    if not asked:
        return {module: library.release for module, library in LIBRARIES.items()}
    chosen: dict[str, str] = {}
    for item in asked:
        if item.strip() == "none":
            continue
        wanted, _, release = (part.strip() for part in item.partition("=="))
        library = next((lib for lib in LIBRARIES.values() if wanted in (lib.module, lib.name)), None)
        if library is None:
            known = ", ".join(LIBRARIES)
            raise StandInError(f"--stand-in {item}: no stand-in for {wanted!r} (there are: {known}; or none)")
        try:
            Version(release or library.release)
        except InvalidVersion:
            raise StandInError(f"--stand-in {item}: {release!r} is not a release number") from None
        chosen[library.module] = release or library.release
    return chosen


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the chosen libraries' top-level packages in SITE (their submodules are then found
    through the package's own path) and notes which the program imported."""

    def __init__(self, chosen: dict[str, str]) -> None:
        self.chosen = chosen
        self.imported: list[str] = []

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.chosen:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, [str(SITE)])
        if spec is not None and fullname not in self.imported:
            self.imported.append(fullname)
        return spec


def install(chosen: dict[str, str], real_first: bool) -> _Finder:
    """Make the chosen stand-ins importable in this process: before the installed packages, or
    after them where a real library may run (`real_first`, the original on CUDA)."""
    versions.chosen.update(chosen)
    finder = _Finder(chosen)
    if real_first:
        sys.meta_path.append(finder)
    else:
        sys.meta_path.insert(0, finder)
    return finder


def described(imported: Sequence[str]) -> list[str]:
    """`flash-attn 2.8.3 (flash_attn)`, for each stand-in the original imported."""
    return [f"{LIBRARIES[m].name} {versions.of(m)} ({m})" for m in imported]
