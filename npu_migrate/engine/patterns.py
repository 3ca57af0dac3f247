"""Code patterns with $NAME metavariables: compiled once, matched structurally against CST
nodes (whitespace, comments and parentheses ignored; dotted names compared after import
resolution), and fix templates filled with what the metavariables matched."""

from __future__ import annotations

import ast
import functools
import re
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import libcst as cst

from npu_migrate.engine.holds import children, concrete_types, subtree
from npu_migrate.engine.names import dotted_parts
from npu_migrate.engine.regions import ASSIGNED, CALLED, Token

METAVARIABLE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_PREFIX = "__mv_"
_IGNORED = concrete_types(
    cst.SimpleWhitespace,
    cst.ParenthesizedWhitespace,
    cst.TrailingWhitespace,
    cst.EmptyLine,
    cst.Comment,
    cst.Newline,
    cst.Comma,
    cst.LeftParen,
    cst.RightParen,
)
_LEAF_FIELDS = {
    cst.Name: "value",
    cst.Integer: "value",
    cst.Float: "value",
    cst.Imaginary: "value",
    cst.FormattedStringText: "value",
}

Qualify = Callable[[list[str]], "str | None"]
Spell = Callable[[str], "tuple[str, str | None]"]


@functools.lru_cache(maxsize=4096)
def parse_code(code: str) -> cst.CSTNode:
    """An expression, else one simple statement, else one compound statement (a whole `def`).
    Cached: CST nodes are immutable, and templates and patterns repeat."""
    try:
        return cst.parse_expression(code)
    except cst.ParserSyntaxError:
        statement = cst.parse_statement(textwrap.dedent(code))
        if isinstance(statement, cst.SimpleStatementLine):
            if len(statement.body) != 1:
                raise ValueError(f"pattern must be one statement: {code!r}") from None
            return statement.body[0]
        return statement


@dataclass(frozen=True)
class Pattern:
    source: str
    tree: cst.CSTNode

    @classmethod
    @functools.cache
    def compile(cls, source: str) -> Pattern:
        return cls(source, parse_code(METAVARIABLE.sub(lambda m: _PREFIX + m.group(1), source)))

    @functools.cached_property
    def _anchor(self) -> Callable[[cst.CSTNode], bool]:
        """A cheap first test that most nodes of the root type fail (see _first_test)."""
        return _first_test(self.tree)

    @functools.cached_property
    def root_key(self) -> tuple[str, object] | None:
        """node_key of every node this pattern can match, where _first_test asks for one (the
        callee's last name, the operator, the def's name), so that a kind tries a node only
        with the patterns keyed as it is; None where it does not."""
        return _root_key(self.tree)

    @functools.cached_property
    def stdlib_test(self) -> Callable[[ast.AST], bool]:
        """What a node the stdlib parser read must be to match this pattern: the pattern as that
        parser reads it, compared part by part (_stdlib_same). A necessary test only: what only
        the match can tell (a dotted name the imports resolve, a metavariable bound twice), it
        lets pass."""
        try:
            parsed = ast.parse(textwrap.dedent(placeholders(self.source)))
        except SyntaxError:
            return lambda node: True
        if len(parsed.body) != 1:
            return lambda node: True
        tree: ast.AST = parsed.body[0]
        if isinstance(tree, ast.Expr) and not isinstance(self.tree, cst.Expr):
            tree = tree.value  # an expression pattern
        key = self.root_key
        types = _stdlib_types(tree)
        if types is None:
            return lambda node: key is None or _stdlib_key(node) == key
        value = getattr(tree, "value", None) if isinstance(tree, _VALUED) else None
        values = _stdlib_types(value) if isinstance(value, ast.AST) else None
        return lambda node: (
            type(node) in types
            and (values is None or type(node.value) in values)  # type: ignore[attr-defined]
            and _stdlib_same(tree, node)
            and (key is None or _stdlib_key(node) == key)
        )

    @property
    def key(self) -> str:
        """What the pattern is anchored on, as overlap keys read: `call:torch.nn.functional.silu`
        for a call of a fixed callee, else the root node type and its anchor."""
        tree = self.tree
        if isinstance(tree, cst.Call) and (parts := dotted_parts(tree.func)) and not _has_metavariable(parts):
            return "call:" + ".".join(parts)
        anchor = ""
        if isinstance(tree, cst.BinaryOperation):
            anchor = type(tree.operator).__name__
        elif isinstance(tree, cst.FunctionDef):
            anchor = tree.name.value
        elif isinstance(tree, cst.Call):
            anchor = _last_name(tree.func) or ""
        return f"{type(tree).__name__}:{anchor}"

    @property
    def root_type(self) -> type[cst.CSTNode]:
        return type(self.tree)

    @property
    def assigned_metavariables(self) -> set[str]:
        """The metavariables among an assignment pattern's targets (`$A, $B = ...`)."""
        if not isinstance(self.tree, cst.Assign):
            return set()
        targets = cst.Module(body=[]).code_for_node(
            cst.Tuple([cst.Element(t.target) for t in self.tree.targets])
        )
        return set(re.findall(_PREFIX + r"(\w+)", targets))

    @property
    def words(self) -> set[str]:
        """What a file must contain for the pattern to match, in the prefilter's tokens: names
        reached as attributes as `.name`, other names as words (metavariables aside)."""
        return set(_tokens(self.tree))

    def anchors(self) -> list[list[Token]]:
        """What every match spells (see engine.regions): each dotted name of the pattern, spelled
        through the file's imports or as written where not imported; the def's name; each
        attribute read on a metavariable. Each followed by `(` where the pattern calls it, and by
        `=` where it assigns to it. Empty for a pattern of metavariables and operators."""
        found: list[list[Token]] = []
        for dotted, is_attribute, then in _names(self.tree, ""):
            last = Token.word(dotted.rsplit(".", 1)[-1], then)
            found.append([last] if is_attribute else [Token.name(dotted, then), last])
        if isinstance(self.tree, cst.FunctionDef) and _metavar(self.tree.name) is None:
            found.append([Token.word(self.tree.name.value)])
        return found

    def unifies(self, other: Pattern) -> bool:
        """Whether some code could match both patterns (guards aside): a metavariable on either
        side stands for anything."""
        return _unify(self.tree, other.tree)

    def match(
        self, node: cst.CSTNode, qualify: Qualify, bound: dict[str, cst.CSTNode] | None = None
    ) -> dict[str, cst.CSTNode] | None:
        """The metavariable bindings if `node` matches (consistent with `bound`), else None."""
        if not self._anchor(node):
            return None
        bindings = dict(bound or {})
        return bindings if _same(self.tree, node, bindings, qualify) else None


def node_key(node: cst.CSTNode) -> tuple[str, object] | None:
    """A node's Pattern.root_key: a call's callee's last name, a binary operation's operator, a
    def's name; None for other nodes."""
    if isinstance(node, cst.Call):
        return "call", _last_name(node.func)
    if isinstance(node, cst.BinaryOperation):
        return "operator", type(node.operator)
    if isinstance(node, cst.FunctionDef):
        return "def", node.name.value
    return None


def _root_key(tree: cst.CSTNode) -> tuple[str, object] | None:
    if isinstance(tree, cst.Call):
        parts = dotted_parts(tree.func)
        return ("call", parts[-1]) if parts and not parts[-1].startswith(_PREFIX) else None
    if isinstance(tree, cst.FunctionDef) and _metavar(tree.name) is not None:
        return None  # any def: its name is bound
    return node_key(tree)


def _first_test(tree: cst.CSTNode) -> Callable[[cst.CSTNode], bool]:
    """What a node must be to match `tree`, tested without walking it: the callee's last name
    for a call, the operator for a binary operation, the name of a def, an assignment's value
    so (statement patterns: most assignments fail here), else the node's type. A metavariable,
    and a dotted name (which the file may spell through an alias), take anything."""
    if _metavar(tree) is not None or isinstance(tree, cst.Name | cst.Attribute):
        return lambda node: True
    key = _root_key(tree)
    if key is not None:
        return lambda node: node_key(node) == key
    if isinstance(tree, cst.Assign) and len(tree.targets) == 1:
        value = _first_test(tree.value)
        return lambda node: isinstance(node, cst.Assign) and len(node.targets) == 1 and value(node.value)
    kind = type(tree)
    return lambda node: type(node) is kind


# the stdlib parser's binary operators -> libcst's (all of them: a node_key compares them)
_OPERATORS: dict[type[ast.operator], type[cst.BaseBinaryOp]] = {
    ast.Add: cst.Add,
    ast.Sub: cst.Subtract,
    ast.Mult: cst.Multiply,
    ast.Div: cst.Divide,
    ast.FloorDiv: cst.FloorDivide,
    ast.Mod: cst.Modulo,
    ast.Pow: cst.Power,
    ast.MatMult: cst.MatrixMultiply,
    ast.LShift: cst.LeftShift,
    ast.RShift: cst.RightShift,
    ast.BitOr: cst.BitOr,
    ast.BitXor: cst.BitXor,
    ast.BitAnd: cst.BitAnd,
}


# Statements whose value the stdlib test compares first (by type) before the whole pattern.
_VALUED = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Return)


def _stdlib_types(pattern: ast.AST) -> frozenset[type] | None:
    """The node types _stdlib_same lets pass for `pattern` (None: any)."""
    if isinstance(pattern, ast.Name) and pattern.id.startswith(_PREFIX):
        return None
    if isinstance(pattern, ast.Attribute) and _ast_dotted(pattern):
        return frozenset({ast.Name, ast.Attribute})
    return frozenset({type(pattern)})


def _stdlib_same(pattern: ast.AST, node: ast.AST) -> bool:
    """Whether the stdlib parser's `node` may match the `pattern` it read: the same node types
    and field values, a metavariable matching anything, a dotted name any name (the imports
    resolve it: `from torch.nn.functional import softmax as sm`), a call that unpacks its
    arguments any call."""
    if isinstance(pattern, ast.Name) and pattern.id.startswith(_PREFIX):
        return True
    if isinstance(pattern, ast.Name) and not isinstance(node, ast.Name):
        return False  # a plain name is the file's own: the same name (see _same)
    if isinstance(pattern, ast.Attribute) and _ast_dotted(pattern):
        return isinstance(node, ast.Name | ast.Attribute)  # an import may spell it any way
    if type(pattern) is not type(node):
        return False
    if isinstance(node, ast.Call) and (
        any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords)
    ):
        return True
    for name in pattern._fields:
        if name in _UNCOMPARED:
            continue
        mine, theirs = getattr(pattern, name, None), getattr(node, name, None)
        if isinstance(mine, list):
            if not isinstance(theirs, list) or len(mine) != len(theirs):
                return False
            if not all(_stdlib_value_same(a, b) for a, b in zip(mine, theirs, strict=True)):
                return False
        elif not _stdlib_value_same(mine, theirs) and not (name in _NAMES and str(mine).startswith(_PREFIX)):
            return False
    return True


def _stdlib_value_same(mine: object, theirs: object) -> bool:
    if isinstance(mine, ast.AST):
        return isinstance(theirs, ast.AST) and _stdlib_same(mine, theirs)
    return mine == theirs


def _ast_dotted(node: ast.expr) -> bool:
    """A plain dotted name with no metavariable in it."""
    while isinstance(node, ast.Attribute):
        if node.attr.startswith(_PREFIX):
            return False
        node = node.value
    return isinstance(node, ast.Name) and not node.id.startswith(_PREFIX)


_UNCOMPARED = frozenset({"ctx", "type_comment", "kind"})  # no match tells these apart
_NAMES = frozenset({"attr", "arg"})  # an attribute's or keyword's name: a metavariable there binds it


def _stdlib_key(node: ast.AST) -> tuple[str, object] | None:
    """node_key of the stdlib parser's expression."""
    if isinstance(node, ast.Call):
        return "call", _ast_last_name(node.func)
    if isinstance(node, ast.BinOp):
        return "operator", _OPERATORS[type(node.op)]
    return None


def _ast_last_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def _tokens(node: cst.CSTNode) -> Iterator[str]:
    if isinstance(node, cst.Attribute):
        if _metavar(node.attr) is None:
            yield "." + node.attr.value
        yield from _tokens(node.value)
    elif isinstance(node, cst.Name):
        if _metavar(node) is None:
            yield node.value
    else:
        for child in node.children:
            yield from _tokens(child)


def _names(node: cst.CSTNode, then: str) -> Iterator[tuple[str, bool, str]]:
    """The dotted names of a pattern that have no metavariable, and the attribute names it reads
    on metavariables (flagged True), each with what follows it: `then` for the node itself
    (CALLED for the callee of a call, ASSIGNED for an assignment target). Keyword names of
    arguments aside: they are not names the match spells through its imports."""
    if isinstance(node, cst.Name | cst.Attribute):
        parts = dotted_parts(node)
        if parts is not None and not _has_metavariable(parts):
            yield ".".join(parts), False, then
            return
        if isinstance(node, cst.Attribute) and _metavar(node.attr) is None:
            yield node.attr.value, True, then
    for child in node.children:
        if isinstance(node, cst.Arg) and child is node.keyword:
            continue
        follows = ""
        if isinstance(node, cst.Call) and child is node.func:
            follows = CALLED
        elif isinstance(node, cst.AssignTarget) and child is node.target:
            follows = ASSIGNED
        yield from _names(child, follows)


def _has_metavariable(parts: list[str]) -> bool:
    return any(p.startswith(_PREFIX) for p in parts)


def _last_name(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return node.value if isinstance(node, cst.Name) else None


def _metavar(node: cst.CSTNode) -> str | None:
    if isinstance(node, cst.Name) and node.value.startswith(_PREFIX):
        return node.value[len(_PREFIX) :]
    return None


def _unify(a: cst.CSTNode, b: cst.CSTNode) -> bool:
    if _metavar(a) is not None or _metavar(b) is not None:
        return True
    if type(a) is not type(b):
        return False
    leaf = _LEAF_FIELDS.get(type(a))
    if leaf and getattr(a, leaf) != getattr(b, leaf):
        return False
    if isinstance(a, cst.SimpleString):
        return a.evaluated_value == b.evaluated_value  # type: ignore[attr-defined]
    mine = [c for c in a.children if type(c) not in _IGNORED]
    theirs = [c for c in b.children if type(c) not in _IGNORED]
    return len(mine) == len(theirs) and all(_unify(x, y) for x, y in zip(mine, theirs, strict=True))


def _same(
    pattern: cst.CSTNode,
    node: cst.CSTNode,
    bindings: dict[str, cst.CSTNode],
    qualify: Qualify,
) -> bool:
    name = _metavar(pattern)
    if name is not None:
        if name in bindings:
            return bindings[name].deep_equals(node)
        bindings[name] = node
        return True
    if isinstance(pattern, cst.Name | cst.Attribute):
        wanted = dotted_parts(pattern)
        if wanted is not None and not any(p.startswith(_PREFIX) for p in wanted):
            parts = dotted_parts(node) if isinstance(node, cst.BaseExpression) else None
            if parts is None:
                return False
            if len(wanted) == 1 and parts == wanted:
                return True  # a plain name is the file's own (`rotate_half`), defined or imported
            return (qualify(parts) or ".".join(parts)) == ".".join(wanted)
    if type(pattern) is not type(node):
        return False
    if isinstance(pattern, cst.SimpleString):
        return pattern.evaluated_value == node.evaluated_value  # type: ignore[attr-defined]
    leaf = _LEAF_FIELDS.get(type(pattern))
    if leaf and getattr(pattern, leaf) != getattr(node, leaf):
        return False
    mine, theirs = _pattern_parts(pattern), _parts(node)
    return len(mine) == len(theirs) and all(
        _same(p, n, bindings, qualify) for p, n in zip(mine, theirs, strict=True)
    )


def _parts(node: cst.CSTNode) -> list[cst.CSTNode]:
    """A node's children that a match compares (whitespace, commas and parentheses aside)."""
    return [c for c in children(node) if type(c) not in _IGNORED]


# A pattern's nodes live as long as its rule, and each is compared with many of the file's.
_pattern_parts = functools.cache(_parts)


class _Spelling(cst.CSTTransformer):
    """Rewrites the qualified dotted names of a template the way the file spells them."""

    def __init__(self, spell: Spell) -> None:
        super().__init__()
        self.spell = spell

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        return dotted_parts(node) is None

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        parts = dotted_parts(original)
        if parts is None or any(p.startswith(_PREFIX) for p in parts):
            return updated
        code, _ = self.spell(".".join(parts))
        return _spelled_name(code).with_changes(lpar=updated.lpar, rpar=updated.rpar)


@functools.lru_cache(maxsize=4096)
def _spelled_name(code: str) -> cst.BaseExpression:
    """A dotted name as the file spells it (templates share their nodes, as parse_code's do)."""
    return cst.parse_expression(code)


_ATOMIC = (
    cst.Name,
    cst.Attribute,
    cst.Call,
    cst.Subscript,
    cst.SimpleString,
    cst.FormattedString,
    cst.ConcatenatedString,
    cst.Integer,
    cst.Float,
    cst.Imaginary,
    cst.List,
    cst.Tuple,
    cst.Dict,
    cst.Set,
)


def placeholders(code: str) -> str:
    return METAVARIABLE.sub(lambda m: _PREFIX + m.group(1), code)


class _Fill(cst.CSTTransformer):
    """Puts each metavariable's code in place (parenthesised where an operator needs it), and
    drops keyword arguments whose value needs a metavariable that is not bound."""

    def __init__(self, codes: dict[str, str]) -> None:
        super().__init__()
        self.codes = codes
        self.bare: set[cst.CSTNode] = set()
        self.dropped: set[cst.Arg] = set()

    def visit_Arg(self, node: cst.Arg) -> bool:
        self.bare.add(node.value)
        wanted = [name for n in subtree(node.value) if (name := _metavar(n)) is not None]
        if node.keyword is not None and any(w not in self.codes for w in wanted):
            self.dropped.add(node)
            return False
        return True

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg | cst.RemovalSentinel:
        return cst.RemoveFromParent() if original in self.dropped else updated

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        args = list(updated.args)
        if args and len(args) < len(original.args):  # an argument was dropped: no dangling comma
            args[-1] = args[-1].with_changes(comma=original.args[-1].comma)
        return updated.with_changes(args=args)

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        if not original.value.startswith(_PREFIX):
            return updated
        name = original.value[len(_PREFIX) :]
        if name not in self.codes:
            raise ValueError(f"${name} is not bound here")
        value = cst.parse_expression(self.codes[name])
        if original in self.bare or isinstance(value, _ATOMIC) or value.lpar:
            return value
        return value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def fill(template: str, codes: dict[str, str], spell: Spell) -> tuple[cst.CSTNode, list[str]]:
    """Fill a fix template with the code of each bound metavariable; qualified names in the
    template are spelled through the file's imports. Returns the node and modules to import.
    Raises ValueError when a metavariable the template needs outside an optional keyword
    argument is not bound."""
    spellings = tuple(map(spell, _dotted_names(template)))
    tree = _spelled(template, spellings).visit(_Fill(codes))
    assert isinstance(tree, cst.CSTNode)
    return tree, [module for _, module in spellings if module]


@functools.lru_cache(maxsize=1024)
def _dotted_names(template: str) -> tuple[str, ...]:
    """The qualified names a template spells through the file's imports, in order."""
    asked: list[str] = []

    def ask(name: str) -> tuple[str, str | None]:
        asked.append(name)
        return name, None

    parse_code(placeholders(template)).visit(_Spelling(ask))
    return tuple(asked)


@functools.lru_cache(maxsize=1024)
def _spelled(template: str, spellings: tuple[tuple[str, str | None], ...]) -> cst.CSTNode:
    """The template with its qualified names spelled as a file spells them (the same for every
    file that spells them alike)."""
    spelled = dict(zip(_dotted_names(template), spellings, strict=True))
    tree = parse_code(placeholders(template)).visit(_Spelling(spelled.__getitem__))
    assert isinstance(tree, cst.CSTNode)  # a template's root is never removed or flattened
    return tree


def code_of(node: cst.CSTNode, module: cst.Module) -> str:
    return module.code_for_node(node).strip()
