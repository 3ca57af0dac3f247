"""Which release of each CUDA library the original side's stand-ins behave as: where a
library's Python API changed between releases (flash-attn's causal alignment, the arity of
`unpad_input`, what FlashAttention 3 returns), the release the project was written for decides.
Set once per side process by `stand_ins.install`."""

from __future__ import annotations

from packaging.version import Version

chosen: dict[str, str] = {}


def of(module: str) -> str:
    return chosen[module]


def at_least(module: str, release: str) -> bool:
    return Version(chosen[module]) >= Version(release)
