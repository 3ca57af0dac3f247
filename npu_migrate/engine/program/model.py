"""The program model of one file: what its code does around the places rules match, read once
from the stdlib parser's tree of the whole file (both of the engine's roads ask the same model,
so they decide the same way).

It knows:

* guards: every piece of code whose execution depends on the value of an expression (the test
  of an `if`, `while` or conditional expression, each operand of `and`/`or` for the operands
  after it, a loop's iterable for its body, an early exit or `assert` for the rest of its block,
  a test-skipping decorator for the test it skips);
* values: where a value flows (a variable in its scope, an attribute of any object, what a
  function or property returns, a parameter's default), so that a test that reads `has_gpu`
  is traced to `has_gpu = torch.cuda.is_available()`;
* bound attributes: the attributes the file's own code binds (`self.is_cuda = ...`, a class
  attribute, a method): the code's own, not a tensor's;
* comparisons (`device == "cuda"`), with the values their operands read;
* calls into compiled extensions (`_C.nms(...)`, `ext_module.roi_align_forward(...)`), CUDA code
  no Python rule can migrate;
* availability flags: a name a `try` sets True once its imports succeed (`import flash_attn`,
  then `FLASH_ATTN_2_AVAILABLE = True`, False in the `except ImportError`), and the code that
  runs only where such a flag is true (`if ... and FLASH_ATTN_3_AVAILABLE:`, the rest of a block
  after `assert FLASH_ATTN_2_AVAILABLE`);
* whether the file already keeps a path for the NPU beside CUDA (a `try` that imports torch_npu
  and goes on without it, `is_torch_npu_available()`, `torch_npu = None`);
* the functions whose device their caller chooses (a parameter named like `device`, which a
  test's fixture or a caller may set to the CPU);
* what is handed on by keyword to a call (`DDPStrategy(parallel_devices=devices)`), for the
  keywords the run asks about: another file of the run keeps comparing an attribute of that
  name with CUDA (engine.program.run), and pytest's `parametrize` cases bound to the test's
  parameters, so that a case's value is followed into the test's calls;
* placements: the objects the code visibly moves to an accelerator (`model.cuda()`,
  `model = Net().to("cuda")`, `self.net.to(device)` where every value of `device` names CUDA or
  the NPU), and what each call's first argument (or `params=`) reads, so that a fix whose code
  needs its data on the NPU is made only where the data is seen going there."""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from npu_migrate.engine.program.spans import Columns, Position, Span

# What a value is known by: ("name", scope, name), ("attr", name), ("call", function name).
Key = tuple[str | int, ...]


@dataclass(frozen=True)
class Guard:
    """`test` decides whether `guarded` runs."""

    test: Span
    guarded: tuple[Span, ...]
    header: str  # the guard's first line, as written, for messages
    reads: frozenset[Key]  # the values the test reads
    conjunctive: bool  # one atom kept as it was keeps the whole test as it was (an atom, `not`, `and`)
    uses: frozenset[Key] = frozenset()  # the values the guarded code reads (if, while, for, x if t else y)
    branches: bool = False  # an `if` or `x if t else y`: the test picks the branch, and what it binds


@dataclass(frozen=True)
class Value:
    """A value bound to `key` (an assignment's right side, a return, a default)."""

    key: Key
    span: Span
    reads: frozenset[Key]
    conjunctive: bool  # as Guard.conjunctive
    question: bool  # a comparison, `and`/`or`, `not`: a question whatever it asks


@dataclass(frozen=True)
class Comparison:
    """`a == b`, `x in (...)`: a rewritten operand must still meet what the other operand holds."""

    span: Span
    text: str  # its first line, for messages
    reads: frozenset[Key]
    equality: bool  # `==` or `!=`: both sides must mean the same thing


@dataclass(frozen=True)
class NativeCall:
    span: Span
    code: str


@dataclass(frozen=True)
class DeviceParameter:
    """A function's `parameter` (named like `device`) decides where the data of `body` lives."""

    body: Span
    parameter: str
    line: int


@dataclass(frozen=True)
class Handed:
    """`keyword=value` in a call: `value` (at `span`, reading `reads`) is handed on as `keyword`."""

    keyword: str
    span: Span
    reads: frozenset[Key]


@dataclass
class Program:
    guards: list[Guard] = field(default_factory=list)
    values: dict[Key, list[Value]] = field(default_factory=dict)
    bound_attributes: dict[str, int] = field(default_factory=dict)  # name -> first line binding it
    native_calls: list[NativeCall] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    imported: dict[Key, str] = field(default_factory=dict)  # a module-level name -> where it comes from
    dual_path: str | None = None  # why the file already keeps a path for the NPU beside CUDA
    cuda_member_beside: str = ""  # the other devices' modules, when the file is the CUDA member of a family
    device_parameters: list[DeviceParameter] = field(default_factory=list)
    placed: set[Key] = field(default_factory=set)  # objects moved to an accelerator, visibly
    data_of: dict[Position, frozenset[Key]] = field(
        default_factory=dict
    )  # a call's start -> what its data reads
    # Keys bound to a device that names an accelerator, and keys bound to anything else.
    accelerator_keys: set[Key] = field(default_factory=set)
    other_keys: set[Key] = field(default_factory=set)
    placed_through: list[tuple[Key, Key]] = field(default_factory=list)  # `x.to(device)`: x, device
    handed: list[Handed] = field(default_factory=list)  # for the keywords Program.of was asked about
    # What each attribute is bound to anywhere in the classes read: the callee as written
    # (`nn.Dropout`), None for a value that is not a call of a name.
    attribute_callees: dict[str, set[str | None]] = field(default_factory=dict)
    # A name a `try` sets true once its imports succeed -> the spans of those imports.
    availability: dict[Key, list[Span]] = field(default_factory=dict)
    # Code that runs only where every name of the set is true (an `if`'s body, after an `assert`).
    requires: list[tuple[Span, frozenset[Key]]] = field(default_factory=list)
    # Attribute names other files of the run keep comparing with CUDA, with where (engine.program.run).
    compared_elsewhere: dict[str, str] = field(default_factory=dict)

    def on_accelerator(self, reads: frozenset[Key]) -> bool:
        """Whether data that reads `reads` (or the values those keys were bound to) is visibly
        on an accelerator."""
        accelerators = self.accelerator_keys - self.other_keys
        placed = self.placed | {key for key, device in self.placed_through if device in accelerators}
        expanded = set(reads).union(*(v.reads for key in reads for v in self.values.get(key, ())))
        return bool(expanded & placed)

    @classmethod
    def of(
        cls,
        tree: ast.Module,
        lines: Sequence[str],
        focus: Collection[int] | None = None,
        keywords: Collection[str] = (),
        whole: Callable[[], ast.Module | None] | None = None,
    ) -> Program:
        """The model of a module; with `focus` (lines), of the functions and classes around those
        lines and the module's other statements only (a definition with no focus line in it can
        neither guard nor hold a match; reading it would cost most of the time). `keywords`: the
        keyword arguments to record as Program.handed. `whole`: the whole file's tree, where
        `tree` has stubs for definitions away from the focus (engine.partial_tree)."""
        program = _Reader(lines, sorted(focus) if focus is not None else None, keywords).read(tree)
        if any("torch_npu" in line or "npu_available" in line for line in lines):
            everything = whole() if whole else tree
            program.dual_path = _dual_path(everything) if everything else None
        return program


# A module that is a compiled extension by its name (`_C`, `selective_scan_cuda`, `_ext`,
# `deform_conv_cuda`, `fused_layer_norm_cuda`, `box_ops_cpp`).
_EXTENSION_MODULE = re.compile(r"(?:^|_)(?:C|ext|cuda|cpp|kernels?)$")
# Calls whose result is a compiled extension: torch.utils.cpp_extension's loaders, mmcv's
# ext_loader.load_ext, DeepSpeed's `SomeBuilder().load()`.
_EXTENSION_LOADERS = frozenset({"load_ext", "load_inline"})
# Packages whose modules are not the project's extensions (`from torch import cuda`).
_NOT_EXTENSIONS = frozenset({"torch", "torch_npu", "torchvision", "numpy", "jax", "tensorflow"})
_NPU_AVAILABLE = re.compile(r"^is_(?:torch_)?npu_available$")
_SKIPS = frozenset({"skipif", "skipIf", "skipUnless"})
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_DEVICE_PARAMETER = re.compile(r"^(?:\w+_)?device$")  # device, torch_device, target_device
_EXITS = frozenset({"skip", "skipTest", "exit", "_exit", "fail"})  # pytest.skip, self.skipTest, sys.exit


class _Scope:
    def __init__(self, node: ast.AST | None, names: set[str] | None, is_class: bool = False) -> None:
        self.id = id(node) if node is not None else 0
        self.node = node
        self.names = names  # a function's local names; None for the module and classes
        self.is_class = is_class


_VISITS: dict[type[ast.AST], Callable[[_Reader, Any], None]] = {}


class _Reader(ast.NodeVisitor):
    def __init__(self, lines: Sequence[str], focus: list[int] | None, keywords: Collection[str]) -> None:
        self.lines = lines
        self.focus = focus
        self.keywords = keywords
        self.columns = Columns(lines)
        self.program = Program()
        self.scopes: list[_Scope] = [_Scope(None, None)]
        self.extensions: set[str] = set()
        self.loaders: set[str] = set()  # local names of torch.utils.cpp_extension.load

    def read(self, tree: ast.Module) -> Program:
        self._block(tree.body)
        return self.program

    # ------------------------------------------------------------------ walking, with blocks and scopes

    def visit(self, node: ast.AST) -> None:
        """ast.NodeVisitor's dispatch, looked up once per node type (it builds the method's name
        at every node)."""
        kind = type(node)
        method = _VISITS.get(kind)
        if method is None:
            method = _VISITS[kind] = getattr(_Reader, f"visit_{kind.__name__}", _Reader.generic_visit)
        method(self, node)

    def generic_visit(self, node: ast.AST) -> None:
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, list):
                if value and isinstance(value[0], ast.stmt):
                    self._block(value)
                else:
                    for item in value:
                        if isinstance(item, ast.AST):
                            self.visit(item)
            elif isinstance(value, ast.AST):
                self.visit(value)

    def _block(self, body: list[ast.stmt]) -> None:
        """A block's statements; an early exit or an assert guards the rest of the block."""
        for i, statement in enumerate(body):
            if isinstance(statement, _DEFINITIONS) and not self._in_focus(statement):
                if self.scopes[-1].is_class:
                    self._bind_attribute(statement.name, statement)
                    self._callees(statement)
                continue
            exits = isinstance(statement, ast.If) and _exits(statement)
            if (exits or isinstance(statement, ast.Assert)) and i + 1 < len(body):
                rest = self.columns.around(body[i + 1 :])
                self._guard(statement.test, [rest], statement)  # type: ignore[attr-defined,list-item]
            if isinstance(statement, ast.Assert):
                self._require(statement.test, body[i + 1 :])
            self.visit(statement)

    def _in_focus(self, node: ast.stmt) -> bool:
        if self.focus is None:
            return True
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
        at = bisect.bisect_left(self.focus, first)
        return at < len(self.focus) and self.focus[at] <= (node.end_lineno or node.lineno)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        owner = self.scopes[-1]
        if owner.is_class:
            self._bind_attribute(node.name, node)
        for decorator in node.decorator_list:
            self.visit(decorator)
            test = _skip_condition(decorator)
            if test is not None:
                self._guard(test, [self.columns.around(node.body)], node)  # type: ignore[list-item]
            for parameter, case in _parametrized(decorator):
                self._value(("name", id(node), parameter), case)
        self._defaults(node)
        arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
        device = next((a.arg for a in arguments if _DEVICE_PARAMETER.match(a.arg)), None)
        body = self.columns.around(node.body)
        if device is not None and body is not None:
            self.program.device_parameters.append(DeviceParameter(body, device, node.lineno))
        self.scopes.append(_Scope(node, _local_names(node)))
        self._block(node.body)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.visit(node.body)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for child in [*node.decorator_list, *node.bases, *node.keywords]:
            self.visit(child)
        self.scopes.append(_Scope(node, None, is_class=True))
        self._block(node.body)
        self.scopes.pop()

    # ------------------------------------------------------------------ guards

    def visit_If(self, node: ast.If) -> None:
        self._guard(node.test, self._spans(node.body, node.orelse), node, [*node.body, *node.orelse], True)
        self._require(node.test, node.body)
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:
        self._guard(node.test, self._spans(node.body, node.orelse), node, [*node.body, *node.orelse])
        self.generic_visit(node)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self._guard(node.iter, self._spans(node.body), node, node.body)
        self.generic_visit(node)

    visit_AsyncFor = visit_For

    def visit_Compare(self, node: ast.Compare) -> None:
        if any(isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for op in node.ops):
            equality = any(isinstance(op, ast.Eq | ast.NotEq) for op in node.ops)
            comparison = Comparison(
                self.columns.span(node), self._first_line(node), self._reads(node), equality
            )
            self.program.comparisons.append(comparison)
        self.generic_visit(node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._guard(node.test, self._spans([node.body], [node.orelse]), node, [node.body, node.orelse], True)
        self._require(node.test, [node.body])
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        for i, operand in enumerate(node.values[:-1]):
            self._guard(operand, self._spans(node.values[i + 1 :]), node)
        self.generic_visit(node)

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> None:
        produced = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        for generator in node.generators:
            for test in [generator.iter, *generator.ifs]:
                self._guard(test, self._spans(produced), node)
        self.generic_visit(node)

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension

    def _guard(
        self,
        test: ast.expr,
        guarded: list[Span],
        where: ast.stmt | ast.expr,
        code: Sequence[ast.AST] = (),
        branches: bool = False,
    ) -> None:
        if not guarded:
            return
        uses = frozenset().union(*(self._reads(n) for n in code))  # type: ignore[arg-type]
        self.program.guards.append(
            Guard(self.columns.span(test), tuple(guarded), self._first_line(where), self._reads(test),
                  _conjunctive(test), uses, branches)
        )  # fmt: skip

    def _require(self, test: ast.expr, body: Sequence[ast.stmt | ast.expr]) -> None:
        """`body` runs only where the names `test` asserts (itself, or each operand of an `and`)
        are true (Program.requires)."""
        operands = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
        names = [operand.id for operand in operands if isinstance(operand, ast.Name)]
        span = self.columns.around(body)
        if names and span is not None:
            self.program.requires.append((span, frozenset(self._resolve(name) for name in names)))

    def visit_Try(self, node: ast.Try) -> None:
        """A `try` that imports, sets flags true and catches the ImportError: availability flags."""
        if any(_catches_import_error(handler.type) for handler in node.handlers):
            imports = [self.columns.span(s) for s in node.body if isinstance(s, ast.Import | ast.ImportFrom)]
            for statement in [*node.body, *node.orelse]:
                if imports and isinstance(statement, ast.Assign) and _is_true(statement.value):
                    for target in statement.targets:
                        if isinstance(target, ast.Name):
                            self.program.availability.setdefault(self._resolve(target.id), []).extend(imports)
        self.generic_visit(node)

    def _spans(self, *bodies: Sequence[ast.stmt | ast.expr]) -> list[Span]:
        return [span for body in bodies if (span := self.columns.around(body)) is not None]

    # ------------------------------------------------------------------ values

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._bind(target, node.value)
        if len(self.scopes) == 1 and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            test = _skip_condition(node.value)
            if test is not None:
                self._guard(test, [Span((node.end_lineno or node.lineno, 1 << 30), (1 << 30, 0))], node)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._bind(node.target, node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._bind(node.target, node.value)
        self.generic_visit(node)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self._bind(node.target, node.value)
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:
        function = next((s.node for s in reversed(self.scopes) if s.names is not None), None)
        if node.value is not None and isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            self._value(("call", function.name), node.value)
            if any(_root(d) == "property" or _last(d) == "cached_property" for d in function.decorator_list):
                self._value(("attr", function.name), node.value)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.ctx, ast.Store | ast.Del):
            self._bind_attribute(node.attr, node)
        self.generic_visit(node)

    def _bind(self, target: ast.expr, value: ast.expr) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self._bind(element, value)
        elif isinstance(target, ast.Starred):
            self._bind(target.value, value)
        elif isinstance(target, ast.Attribute):
            self._value(("attr", target.attr), value)
            self._callee(target.attr, value)
        elif isinstance(target, ast.Name):
            moved = _moved_in_chain(value)
            if moved is not None:
                self._place(target, moved[1])
            scope = self.scopes[-1]
            if scope.is_class:
                self._bind_attribute(target.id, target)
                self._value(("attr", target.id), value)
            else:
                self._value(self._resolve(target.id), value)
            if _is_extension(value, self.loaders):
                self.extensions.add(target.id)

    def _callees(self, method: ast.stmt) -> None:
        """What a method not read otherwise binds its attributes to (Program.attribute_callees)."""
        for node in ast.walk(method):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Attribute):
                        self._callee(target.attr, node.value)

    def _callee(self, attribute: str, value: ast.expr) -> None:
        called = isinstance(value, ast.Call) and isinstance(value.func, ast.Name | ast.Attribute)
        callee = ast.unparse(value.func) if called else None  # type: ignore[attr-defined]
        self.program.attribute_callees.setdefault(attribute, set()).add(callee)

    def _defaults(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        args = node.args
        positional = [*args.posonlyargs, *args.args]
        pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True))
        pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
        for arg, default in pairs:
            self._value(("name", id(node), arg.arg), default)

    def _value(self, key: Key, value: ast.expr) -> None:
        (self.program.accelerator_keys if _names_accelerator(value) else self.program.other_keys).add(key)
        self.program.values.setdefault(key, []).append(
            Value(key, self.columns.span(value), self._reads(value), _conjunctive(value), _question(value))
        )

    def _bind_attribute(self, name: str, node: ast.AST) -> None:
        self.program.bound_attributes.setdefault(name, getattr(node, "lineno", 0))

    def _resolve(self, name: str) -> Key:
        """The key of a variable read or bound here: the innermost function that binds it, else
        the module (class bodies are not visible from their methods)."""
        for scope in reversed(self.scopes):
            if scope.names is not None and name in scope.names:
                return ("name", scope.id, name)
        return ("name", 0, name)

    def _reads(self, expression: ast.expr) -> frozenset[Key]:
        """The values an expression reads: its variables, its attributes, what the functions it
        calls return (a method called is read as its return, `torch.device(...)` not as an
        attribute `device`)."""
        keys: set[Key] = set()
        called: set[int] = set()
        for node in ast.walk(expression):
            if isinstance(node, ast.Call):
                called.add(id(node.func))
                name = _last(node.func)
                if name:
                    keys.add(("call", name))
            if isinstance(node, ast.Name):
                keys.add(self._resolve(node.id))
            elif isinstance(node, ast.Attribute) and id(node) not in called:
                keys.add(("attr", node.attr))
        return frozenset(keys)

    # ------------------------------------------------------------------ imports, extensions, the NPU path

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            dotted = alias.name.split(".")
            if dotted[0] in _NOT_EXTENSIONS or not _EXTENSION_MODULE.search(dotted[-1]):
                continue
            if alias.asname or len(dotted) == 1:  # `import a.b_cuda` binds `a`, not the extension
                self.extensions.add(alias.asname or alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            local = alias.asname or alias.name
            if len(self.scopes) == 1:
                self.program.imported[("name", 0, local)] = f"{'.' * node.level}{node.module or ''}"
            package = (node.module or "").split(".")[0]
            if package not in _NOT_EXTENSIONS and _EXTENSION_MODULE.search(alias.name):
                self.extensions.add(local)
            if node.module == "torch.utils.cpp_extension" and alias.name in {"load", "load_inline"}:
                self.loaders.add(local)

    def visit_Call(self, node: ast.Call) -> None:
        if _root(node.func) in self.extensions:
            self.program.native_calls.append(
                NativeCall(self.columns.span(node), f"{ast.unparse(node.func)}(...)")
            )
        flag = _argparse_default(node)
        if flag is not None:
            self._value(("attr", flag[0]), flag[1])
        data = _first_argument(node, "params")  # the data a call works on (an optimizer's `params=`)
        if data is not None:
            self.program.data_of[self.columns.span(node).start] = self._reads(data)
        moved = _moved(node)
        if moved is not None:
            self._place(moved[0], moved[1])
        for keyword in node.keywords:
            if keyword.arg is not None and keyword.arg in self.keywords:
                self.program.handed.append(
                    Handed(keyword.arg, self.columns.span(keyword.value), self._reads(keyword.value))
                )
        self.generic_visit(node)

    def _place(self, target: ast.expr, device: ast.expr | None) -> None:
        """`target` goes to `device` (None: an accelerator, as `.cuda()` says)."""
        key = self._key_of(target)
        if key is None:
            return
        if device is None or _names_accelerator(device):
            self.program.placed.add(key)
        elif (through := self._key_of(device)) is not None:  # `device`, `args.device`, `self.device`
            self.program.placed_through.append((key, through))

    def _key_of(self, node: ast.expr) -> Key | None:
        """What a variable or an attribute is known by; None for any other expression."""
        if isinstance(node, ast.Name):
            return self._resolve(node.id)
        return ("attr", node.attr) if isinstance(node, ast.Attribute) else None

    def _first_line(self, node: ast.stmt | ast.expr) -> str:
        line = self.lines[node.lineno - 1] if 0 < getattr(node, "lineno", 0) <= len(self.lines) else ""
        text = line.strip()
        return text if len(text) <= 60 else text[:57] + "..."


def _dual_path(tree: ast.Module) -> str | None:
    """Why the module already keeps a path for the NPU beside CUDA: a `try` that imports
    torch_npu and goes on without it, `torch_npu = None`, a call or definition of
    is_torch_npu_available() (accelerate's device dispatch defines one per backend), a look for
    the torch_npu package (`find_spec("torch_npu")`)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _NPU_AVAILABLE.match(node.name):
            return f"line {node.lineno} defines {node.name}()"
        if isinstance(node, ast.Call) and _looks_for_torch_npu(node):
            return f"line {node.lineno} looks for the torch_npu package"
        if isinstance(node, ast.Try | getattr(ast, "TryStar", ast.Try)):
            imports = [s for s in node.body if isinstance(s, ast.Import | ast.ImportFrom) and _imports_npu(s)]
            goes_on = any(not (h.body and isinstance(h.body[-1], ast.Raise)) for h in node.handlers)
            if imports and goes_on:
                return f"line {imports[0].lineno} imports torch_npu in a try and goes on without it"
        elif isinstance(node, ast.Assign) and _sets_torch_npu_none(node):
            return f"line {node.lineno} sets torch_npu = None where torch_npu is missing"
        elif isinstance(node, ast.Call) and _NPU_AVAILABLE.match(_last(node.func) or ""):
            return f"line {node.lineno} asks {_last(node.func)}()"
    return None


# A device string that names an accelerator: "cuda", "cuda:0", "npu:1", f"cuda:{rank}".
_ACCELERATOR = re.compile(r"^(?:cuda|npu)(?::|$)")


def _names_accelerator(value: ast.expr) -> bool:
    """`"cuda"`, `f"npu:{rank}"`, `torch.device("cuda", rank)`, and `"cuda" if
    torch.cuda.is_available() else "cpu"`: an accelerator wherever one is (the fixes that ask
    are --unsafe's, NPU-only by nature)."""
    if isinstance(value, ast.IfExp):
        return _names_accelerator(value.body) or _names_accelerator(value.orelse)
    if isinstance(value, ast.Constant):
        return isinstance(value.value, str) and _ACCELERATOR.match(value.value) is not None
    if isinstance(value, ast.JoinedStr):
        first = value.values[0] if value.values else None
        return isinstance(first, ast.Constant) and _names_accelerator(first)
    if isinstance(value, ast.Call) and _last(value.func) == "device" and value.args:
        return _names_accelerator(value.args[0])
    return False


def _moved_in_chain(value: ast.expr) -> tuple[ast.expr, ast.expr | None] | None:
    """The placement in a chain of method calls (`GPT(...).to(device).eval()`), if any."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        moved = _moved(value)
        if moved is not None:
            return moved
        value = value.func.value
    return None


def _moved(call: ast.Call) -> tuple[ast.expr, ast.expr | None] | None:
    """What `x.cuda()`, `x.npu()` or `x.to(device)` moves (its innermost object for a chain,
    `Net().cuda()`: the call's result, so the caller binds it), and the device (None: an
    accelerator)."""
    if not isinstance(call.func, ast.Attribute):
        return None
    method, owner = call.func.attr, call.func.value
    if method in ("cuda", "npu"):
        return owner, None
    if method == "to":
        device = _first_argument(call, "device")
        if device is not None and not (isinstance(device, ast.Attribute) and device.attr.endswith("dtype")):
            return owner, device
    return None


def _argparse_default(call: ast.Call) -> tuple[str, ast.expr] | None:
    """`parser.add_argument("--eval-device", default=...)` binds `args.eval_device` to it."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument" and call.args):
        return None
    flag, default = call.args[0], _keyword(call, "default")
    if default is None or not (isinstance(flag, ast.Constant) and isinstance(flag.value, str)):
        return None
    dest = _keyword(call, "dest")
    name = dest.value if isinstance(dest, ast.Constant) and isinstance(dest.value, str) else flag.value
    return name.lstrip("-").replace("-", "_"), default


def _first_argument(call: ast.Call, keyword: str) -> ast.expr | None:
    """A call's first positional argument, or the one given as `keyword`."""
    if call.args and not isinstance(call.args[0], ast.Starred):
        return call.args[0]
    return _keyword(call, keyword)


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _looks_for_torch_npu(call: ast.Call) -> bool:
    """`importlib.util.find_spec("torch_npu")`, `import_module("torch_npu")`, a package check."""
    name = _last(call.func) or ""
    named = any(isinstance(a, ast.Constant) and a.value == "torch_npu" for a in call.args)
    return named and (name in ("find_spec", "import_module") or "package_available" in name)


def _sets_torch_npu_none(node: ast.Assign) -> bool:
    none = isinstance(node.value, ast.Constant) and node.value.value is None
    return none and any(isinstance(t, ast.Name) and t.id == "torch_npu" for t in node.targets)


def _root(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    if isinstance(node, ast.Call):
        return _root(node.func)
    return node.id if isinstance(node, ast.Name) else None


def _last(node: ast.expr) -> str | None:
    if isinstance(node, ast.Call):
        return _last(node.func)
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def _exits(node: ast.If) -> bool:
    """An `if` with no else whose body always leaves the block (`if not ok: return`, a skip)."""
    if node.orelse or not node.body:
        return False
    last = node.body[-1]
    if isinstance(last, ast.Return | ast.Raise | ast.Continue | ast.Break):
        return True
    return isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) and _last(last.value) in _EXITS


def _skip_condition(node: ast.expr) -> ast.expr | None:
    """The condition of `pytest.mark.skipif(cond, ...)` / `unittest.skipIf(cond, ...)`."""
    if isinstance(node, ast.Call) and _last(node.func) in _SKIPS and node.args:
        return node.args[0]
    return None


def _parametrized(decorator: ast.expr) -> Iterator[tuple[str, ast.expr]]:
    """What `pytest.mark.parametrize("a,b", [(1, 2), ...])` binds each parameter to: the case's
    element where a case is written as a tuple, a list or `pytest.param(...)`, else the whole case."""
    if not (isinstance(decorator, ast.Call) and _last(decorator.func) == "parametrize"):
        return
    if len(decorator.args) < 2:
        return
    names, cases = decorator.args[0], decorator.args[1]
    if isinstance(names, ast.Constant) and isinstance(names.value, str):
        parameters = [n.strip() for n in names.value.split(",") if n.strip()]
    elif isinstance(names, ast.Tuple | ast.List):
        parameters = [n.value for n in names.elts if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    else:
        return
    if not isinstance(cases, ast.Tuple | ast.List):
        for parameter in parameters:
            yield parameter, cases
        return
    for case in cases.elts:
        if isinstance(case, ast.Call) and _last(case.func) == "param":  # pytest.param(1, 2, id=...)
            case = case.args[0] if len(case.args) == 1 else ast.Tuple(elts=case.args)
        elements = case.elts if isinstance(case, ast.Tuple | ast.List) else []
        if len(parameters) > 1 and len(elements) == len(parameters):
            yield from zip(parameters, elements, strict=True)
        else:
            for parameter in parameters:
                yield parameter, case


def _catches_import_error(caught: ast.expr | None) -> bool:
    """Whether an `except` clause catches a failed import (bare, ImportError, its subclass
    ModuleNotFoundError, or Exception, alone or in a tuple)."""
    if caught is None:
        return True
    names = caught.elts if isinstance(caught, ast.Tuple) else [caught]
    return any(_last(n) in {"ImportError", "ModuleNotFoundError", "Exception"} for n in names)


def _is_true(value: ast.expr) -> bool:
    return isinstance(value, ast.Constant) and value.value is True


def _conjunctive(test: ast.expr) -> bool:
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return not isinstance(test.operand, ast.BoolOp)
    if isinstance(test, ast.BoolOp):
        return isinstance(test.op, ast.And) and all(_conjunctive(v) for v in test.values)
    return True


def _question(value: ast.expr) -> bool:
    return isinstance(value, ast.Compare | ast.BoolOp) or (
        isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not)
    )


def _is_extension(value: ast.expr, loaders: set[str]) -> bool:
    """`load_ext(...)`, `cpp_extension.load(...)`, `SomeBuilder().load()`."""
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    if _last(func) in _EXTENSION_LOADERS or (isinstance(func, ast.Name) and func.id in loaders):
        return True
    if isinstance(func, ast.Attribute) and func.attr == "load":
        receiver = func.value
        if isinstance(receiver, ast.Name) and receiver.id == "cpp_extension":
            return True
        return isinstance(receiver, ast.Call) and (_last(receiver.func) or "").endswith("Builder")
    return False


def _imports_npu(statement: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(statement, ast.ImportFrom):
        return (statement.module or "").split(".")[0] == "torch_npu"
    return any(a.name.split(".")[0] == "torch_npu" for a in statement.names)


def _local_names(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The names a function binds (its parameters, assignments, loop targets, imports), less
    those it declares global or nonlocal; nested functions' bodies are theirs."""
    args = function.args
    names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a}
    declared: set[str] = set()
    for node in _own_nodes(function.body):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.Global | ast.Nonlocal):
            declared.update(node.names)
    return names - declared


def _own_nodes(body: list[ast.stmt]) -> Iterator[ast.AST]:
    todo: list[ast.AST] = list(body)
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue  # its name is ours (yielded), its body its own
        todo.extend(ast.iter_child_nodes(node))
