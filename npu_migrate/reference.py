"""What the real torch_npu offers, read from its unpacked sources (never imported): the names a
dotted path resolves to, and each fused operator's documented signature. Used to check that
rules and the emulation name only things the real package has."""

from __future__ import annotations

import ast
import contextlib
import re
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

_SIGNATURE = re.compile(r"^torch_npu\.\s*(\w+)\((.*)\)\s*->", re.MULTILINE)
# the registered aten schemas, and the ATB operators' C++ declarations
_SCHEMA = re.compile(r"^[ \t]*(?:- )?func: (\w+)\(([^\n]*)\)[ \t]*->", re.MULTILINE)
_ATB = re.compile(r"^TORCH_NPU_API [^\s(]+ (\w+)\(([^\n]*)\);", re.MULTILINE)
_SOURCES = (  # where each form is read, documented first
    ("_op_plugin_docs.py", _SIGNATURE),
    ("csrc/aten/npu_native_functions_by_codegen.yaml", _SCHEMA),
    ("include/third_party/op-plugin/op_plugin/include/AtbOpsInterface.h", _ATB),
)


OPAQUE = ast.Pass()  # exists, but what is inside is not readable from the sources
Resolved = list[str] | ast.AST | None  # a module (its parts), a definition, OPAQUE, or nothing


@dataclass(frozen=True)
class OpSignature:
    name: str
    parameters: tuple[str, ...]
    defaults: dict[str, str] = field(default_factory=dict)


def _parse_parameters(text: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """'Tensor query, int head_num, float scale=1., *, bool sync=False' -> names and defaults."""
    names, defaults = [], {}
    depth, current = 0, ""
    pieces = []
    for char in text:  # split on top-level commas only (types like int[2] or defaults like [1, 2])
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        if char == "," and depth == 0:
            pieces.append(current)
            current = ""
        else:
            current += char
    pieces.append(current)
    for piece in (p.strip() for p in pieces):
        if not piece or piece == "*":
            continue
        declaration, _, default = piece.partition("=")
        name = re.findall(r"\w+", declaration)[-1]  # 'Tensor? mask', 'const at::Tensor&x
        names.append(name)
        if default:
            defaults[name] = default.strip()
    return tuple(names), defaults


class TorchNpuReference:
    """The unpacked torch_npu package folder (tests/sources.py fetches the pinned wheel)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @cached_property
    def ops(self) -> dict[str, OpSignature]:
        """Every operator documented in _op_plugin_docs.py, registered without docs (a kernel's
        backward) or declared among the ATB operators torch_npu exposes, by name."""
        found: dict[str, OpSignature] = {}
        for source, pattern in _SOURCES:
            text = (self.root / source).read_text(encoding="utf-8")
            for name, parameters in pattern.findall(text):
                names, defaults = _parse_parameters(parameters)
                found.setdefault(name, OpSignature(name, names, defaults))
        return found

    def _module_file(self, parts: list[str]) -> Path | None:
        path = self.root.joinpath(*parts)
        if (path / "__init__.py").is_file():
            return path / "__init__.py"
        return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None

    @staticmethod
    def _defined(scope: ast.Module | ast.ClassDef, name: str) -> ast.AST | None:
        """The statement that binds `name` at the top of a module or class body, if any."""
        for node in scope.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
                return node
            if isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                    return node
            if isinstance(node, ast.Import | ast.ImportFrom) and any(
                (a.asname or a.name.split(".")[0]) == name for a in node.names
            ):
                return node
        return None

    def _tree(self, module: list[str]) -> ast.Module | None:
        source = self._module_file(module[1:])
        if source is None:
            return None
        with warnings.catch_warnings():  # the package's own sources have invalid escapes
            warnings.simplefilter("ignore", SyntaxWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            return ast.parse(source.read_text(encoding="utf-8"))

    def _origin(self, module: list[str], node: ast.ImportFrom) -> list[str]:
        """The absolute module an import statement in `module` imports from."""
        if not node.level:
            return node.module.split(".") if node.module else []
        is_package = self._module_file(module[1:]) == self.root.joinpath(*module[1:], "__init__.py")
        package = module if is_package else module[:-1]
        base = package[: len(package) - node.level + 1]
        return [*base, *(node.module.split(".") if node.module else [])]

    def _lookup(self, module: list[str], name: str) -> Resolved:
        """What `name` is in a module of the package, imports and star imports followed."""
        tree = self._tree(module)
        if tree is None:
            return OPAQUE if module[:2] == ["torch_npu", "_C"] else None  # compiled: unknown inside
        node = self._defined(tree, name)
        if isinstance(node, ast.ImportFrom):
            alias = next(a for a in node.names if (a.asname or a.name) == name)
            origin = self._origin(module, node)
            return self._lookup(origin, alias.name) if origin[:1] == ["torch_npu"] else OPAQUE
        if isinstance(node, ast.Import):
            return OPAQUE
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            called = node.value.func
            if isinstance(called, ast.Attribute | ast.Name):  # an instance: its class tells
                cls_name = called.attr if isinstance(called, ast.Attribute) else called.id
                for star_module in [module, *self._star_sources(module, tree)]:
                    found = self._lookup_local_class(star_module, cls_name)
                    if found is not None:
                        return found
        if node is not None:
            return node
        if self._module_file([*module[1:], name]) is not None:
            return [*module, name]
        for origin in self._star_sources(module, tree):
            found = self._lookup(origin, name)
            if found is not None:
                return found
        if module == ["torch_npu"] and name in self.ops:
            return OPAQUE  # a C++ operator, known from its documentation
        if name in _all_names(tree):
            return OPAQUE  # exported, defined dynamically
        return None

    def _star_sources(self, module: list[str], tree: ast.Module) -> list[list[str]]:
        return [
            self._origin(module, n)
            for n in tree.body
            if isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)
        ]

    def _lookup_local_class(self, module: list[str], name: str) -> Resolved:
        tree = self._tree(module)
        node = self._defined(tree, name) if tree else None
        return node if isinstance(node, ast.ClassDef) else None

    @staticmethod
    def _attribute(cls: ast.ClassDef, name: str) -> Resolved:
        """An attribute of a class: defined in its body, or handled by its __getattr__ /
        __setattr__ (which then names it as a string)."""
        node = TorchNpuReference._defined(cls, name)
        if node is not None:
            return node
        hooks = [
            n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in ("__getattr__", "__setattr__")
        ]
        strings = {c.value for h in hooks for c in ast.walk(h) if isinstance(c, ast.Constant)}
        return OPAQUE if name in strings else None

    def has(self, qualified: str) -> bool:
        """Whether `torch_npu.a.b.c` (or `torch.npu.a.b`, its alias) exists in the real package."""
        parts = qualified.split(".")
        if parts[:2] == ["torch", "npu"]:
            parts = ["torch_npu", "npu", *parts[2:]]
        if parts[0] != "torch_npu":
            raise ValueError(f"not a torch_npu name: {qualified}")
        current: Resolved = ["torch_npu"]
        for name in parts[1:]:
            if current is OPAQUE:
                return True  # defined in compiled code or dynamically: its attributes are unknown
            if isinstance(current, list):
                current = self._lookup(current, name)
            elif isinstance(current, ast.ClassDef):
                current = self._attribute(current, name)
            else:
                return False  # a function or a plain value has no such attribute
            if current is None:
                return False
        return True


def _all_names(tree: ast.Module) -> set[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            with contextlib.suppress(ValueError):
                return set(ast.literal_eval(node.value))
    return set()


def reference(root: Path) -> TorchNpuReference | None:
    """The reference at `root` (an unpacked torch_npu package folder; the tests fetch one,
    tests/sources.py), if its sources are there."""
    return TorchNpuReference(root) if (root / "_op_plugin_docs.py").is_file() else None
