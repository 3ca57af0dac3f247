"""Which operators a torch_npu version registers NPU kernels for, as its own files say.

A torch_npu wheel lists the operators it implements for the NPU in
`torch_npu/csrc/aten/npu_native_functions.yaml` and `npu_native_functions_by_codegen.yaml`
(sections `supported`, `autograd`, `symint`, `quant`, `custom`): an entry is an operator name
with its overload (`isin.Tensor_Tensor`), alone or as a `func:` schema. The tables shipped in
`kernels/` were extracted from pinned wheels by `python -m npu_migrate.forecast.kernels PACKAGE_FOLDER`
(the tests extract them again and compare). Operators registered in C++ outside these files are
not seen: a forecast says so where it names a gap."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

TABLES = Path(__file__).parent / "kernels"
DEFAULT_VERSION = "2.13.0"
SOURCES = ("npu_native_functions.yaml", "npu_native_functions_by_codegen.yaml")
_SECTIONS = ("supported", "autograd", "symint", "quant", "custom")
_NAME = re.compile(r"^\s*([\w.]+)")


@dataclass(frozen=True)
class KernelTable:
    """One torch_npu version's NPU operators: `aten` names (`addmm`, `isin.Tensor_Tensor`)."""

    version: str
    operators: frozenset[str]

    def has(self, name: str, overload: str) -> bool:
        """Whether `name.overload` has an NPU kernel (`default` is the bare name)."""
        return (name if overload in ("", "default") else f"{name}.{overload}") in self.operators

    def has_any(self, name: str) -> bool:
        """Whether some overload of `name` has an NPU kernel (a composite region is named so)."""
        return name in self.operators or any(op.startswith(f"{name}.") for op in self.operators)


def versions() -> list[str]:
    """The torch_npu versions a forecast can be made for, oldest first."""
    found = [path.stem.removeprefix("torch_npu-") for path in TABLES.glob("torch_npu-*.txt")]
    return sorted(found, key=lambda v: [int(p) if p.isdigit() else p for p in re.split(r"[.+]", v)])


def load(version: str) -> KernelTable:
    """The shipped table of `version`; a ValueError naming the versions there are."""
    path = TABLES / f"torch_npu-{version}.txt"
    if not path.is_file():
        raise ValueError(f"no operator table for torch_npu {version}; tables: {', '.join(versions())}")
    lines = path.read_text(encoding="utf-8").splitlines()
    return KernelTable(version, frozenset(line for line in lines if line and not line.startswith("#")))


def operators_in(texts: dict[str, str]) -> frozenset[str]:
    """The operator names the yaml files (by name) list in their kernel sections (yaml is read
    only here, where a table is built: the CLI's start-up does not load it)."""
    import yaml

    found: set[str] = set()
    for text in texts.values():
        document = yaml.safe_load(text) or {}
        for section in _SECTIONS:
            for entry in document.get(section) or ():
                spelled = entry.get("func") if isinstance(entry, dict) else entry
                match = _NAME.match(str(spelled or ""))
                if match:
                    found.add(match.group(1))
    return frozenset(found)


def from_package(package: Path) -> tuple[str, frozenset[str]]:
    """An unpacked torch_npu package's version (its `version.py`) and operators."""
    match = re.search(r"__version__ = '([^']+)'", (package / "version.py").read_text(encoding="utf-8"))
    if match is None:
        raise ValueError(f"{package}: no __version__ in version.py")
    texts = {name: (package / "csrc" / "aten" / name).read_text(encoding="utf-8") for name in SOURCES}
    return match.group(1), operators_in(texts)


def table_text(version: str, operators: frozenset[str]) -> str:
    header = f"# NPU operators registered by torch_npu {version} ({' and '.join(SOURCES)})\n"
    return header + "".join(f"{op}\n" for op in sorted(operators))


def main(argv: list[str]) -> int:
    """Write the table of each unpacked torch_npu package folder given into kernels/."""
    for given in argv:
        version, operators = from_package(Path(given))
        (TABLES / f"torch_npu-{version}.txt").write_text(table_text(version, operators), encoding="utf-8")
        print(f"torch_npu {version}: {len(operators)} operators")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
