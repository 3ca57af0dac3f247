"""The registry of match kinds. A rule's `match:` mapping names exactly one of these keys; the
rule schema, the overlap check, the prefilter and the one-pass transformer all read this list.
A new kind is one module beside these and one line here (docs/architecture.md shows how)."""

from __future__ import annotations

from npu_migrate.engine.kinds.attribute import AttributeKind
from npu_migrate.engine.kinds.base import Kind
from npu_migrate.engine.kinds.call import CallKind
from npu_migrate.engine.kinds.dependency import PackageIndexKind, PackageKind
from npu_migrate.engine.kinds.import_ import ImportKind
from npu_migrate.engine.kinds.method import MethodKind
from npu_migrate.engine.kinds.name import NameKind
from npu_migrate.engine.kinds.native import CudaKernelKind, CustomOperatorKind
from npu_migrate.engine.kinds.pattern import PatternKind
from npu_migrate.engine.kinds.setting import SettingKind
from npu_migrate.engine.kinds.shell import ShellCommandKind, ShellEnvKind, ShellPipelineKind, ShellWordKind
from npu_migrate.engine.kinds.statements import StatementsKind
from npu_migrate.engine.kinds.string import StringKind

KINDS: tuple[type[Kind], ...] = (
    NameKind,
    CallKind,
    MethodKind,
    AttributeKind,
    StringKind,
    ImportKind,
    PatternKind,
    StatementsKind,
    ShellEnvKind,
    ShellWordKind,
    ShellCommandKind,
    ShellPipelineKind,
    PackageKind,
    PackageIndexKind,
    SettingKind,
    CustomOperatorKind,
    CudaKernelKind,
)


_BY_SCHEMA: dict[type, type[Kind]] = {kind.schema: kind for kind in KINDS}


def kind_of(match: object) -> type[Kind]:
    """The kind whose schema a parsed `match:` mapping is."""
    return _BY_SCHEMA.get(type(match)) or next(kind for kind in KINDS if isinstance(match, kind.schema))


def content_of(match: object) -> str:
    """The kind of file a rule with this match applies to: python (and notebooks), shell,
    requirements (every dependency file), config (YAML and JSON) or native (C++ and CUDA sources)."""
    return kind_of(match).content
