"""Every regular expression the scanner and rewriter use, timed against adversarial text: runs
of each character and each short piece of the pattern's own text, alone and after the literal
its matches start with, ending in a character that makes the match fail (what makes a
backtracking engine retry). A pattern is linear when 8 times the text takes about 8 times as
long; the catalog's rule regexes run on RE2 and need no audit.

    python -m tests.regex_audit

The patterns are found in the sources (`re.compile`, `re.search`... with a literal pattern) and
in the modules' globals (patterns built at import), under npu_migrate less the runtime packages
(emulation, verify), which never read a user's files."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import product
from pathlib import Path

import npu_migrate

RUNTIME = ("npu_migrate.emulation", "npu_migrate.verify")
_CALLS = {"compile", "match", "search", "fullmatch", "finditer", "findall", "sub", "subn", "split"}
_FLAGS_AT = {"compile": 1, "sub": 4, "subn": 4, "split": 3}  # where each call takes its flags
SHORT, LONG = 1_000, 8_000  # characters: 8 times as long
CAP_S = 1.0  # one run past this is exponential, or quadratic beyond repair
NOISE_S = 0.02  # below this, a ratio says nothing
RATIO = 24.0  # 8 for linear, 64 for quadratic
BREAKERS = ("\x00", "\n", "!")
ALWAYS = " \t\n#a0_\\'\"$-.:=(){}[]*+/@,;<>|"


@dataclass(frozen=True)
class Slow:
    audited: Audited
    text: str  # the repeated unit and breaker
    short_s: float
    long_s: float


class _Capped(Exception):
    pass


def _raise_capped(signum: int, frame: object) -> None:
    raise _Capped


def _modules() -> list[str]:
    names = [npu_migrate.__name__]
    for found in pkgutil.walk_packages(npu_migrate.__path__, npu_migrate.__name__ + "."):
        if not found.name.startswith(RUNTIME) and not found.name.endswith("__main__"):
            names.append(found.name)
    return names


def _flags(call: ast.Call, position: int) -> int:
    node = call.args[position] if len(call.args) > position else None
    node = next((k.value for k in call.keywords if k.arg == "flags"), node)
    if node is None:
        return 0
    try:
        return int(eval(compile(ast.Expression(node), "<flags>", "eval"), {"re": re}))
    except Exception:  # flags from a variable: the pattern alone
        return 0


@dataclass(frozen=True)
class Audited:
    pattern: re.Pattern
    where: str  # module.NAME or module:line
    methods: frozenset[str]  # how the code calls it: match, fullmatch, or a search (finditer)


def _calls(tree: ast.AST) -> dict[str, set[str]]:
    """The regex methods each name has called on it (`NAME.match(...)`); "" for any name (less
    `split`, which strings have too)."""
    called: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _CALLS:
            owner = node.func.value
            name = (
                owner.id
                if isinstance(owner, ast.Name)
                else owner.attr
                if isinstance(owner, ast.Attribute)
                else ""
            )
            if name == "re":
                continue
            if name:
                called.setdefault(name, set()).add(node.func.attr)
            if node.func.attr != "split":
                called.setdefault("", set()).add(node.func.attr)
    return called


def _literal_calls(tree: ast.AST) -> Iterator[tuple[ast.Call, str | None]]:
    """`re.compile(...)`, `re.match(...)`... with a literal pattern, and the name it is bound to."""
    bound = {
        id(node.value): node.targets[0].id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
    }
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value
        if not (isinstance(owner, ast.Name) and owner.id == "re" and node.func.attr in _CALLS):
            continue
        if (
            node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str | bytes)
        ):
            yield node, bound.get(id(node))


def patterns() -> list[Audited]:
    """Each pattern, where it is, and how the code calls it: the methods called on the name it is
    bound to, or else every regex method its module calls (the strictest of them is timed)."""
    modules = {name: importlib.import_module(name) for name in _modules()}
    trees = {name: ast.parse(Path(m.__file__ or "").read_bytes()) for name, m in modules.items()}
    calls = {name: _calls(tree) for name, tree in trees.items()}
    everywhere: dict[str, set[str]] = {}
    for called in calls.values():
        for name, methods in called.items():
            everywhere.setdefault(name, set()).update(methods)

    def methods(module: str, name: str | None) -> frozenset[str]:
        """A private name's calls in its module, a public one's anywhere; else its module's."""
        used = (calls[module] if name.startswith("_") else everywhere).get(name) if name else None
        return frozenset(used or calls[module].get("") or {"finditer"})

    found: dict[re.Pattern, Audited] = {}
    for module, tree in trees.items():
        for attribute, value in vars(modules[module]).items():
            if isinstance(value, re.Pattern):
                found.setdefault(value, Audited(value, f"{module}.{attribute}", methods(module, attribute)))
        for call, name in _literal_calls(tree):
            method = call.func.attr  # type: ignore[attr-defined]
            compiled = re.compile(call.args[0].value, _flags(call, _FLAGS_AT.get(method, 2)))  # type: ignore[attr-defined]
            used = methods(module, name) if method == "compile" else frozenset({method})
            found.setdefault(compiled, Audited(compiled, f"{module}:{call.lineno}", used))
    return [*found.values(), *_built()]


def _built() -> list[Audited]:
    """The patterns the engine builds per rule at run time (a name's region anchors: a dotted
    chain with comments and line continuations between its words), from their builder."""
    from npu_migrate.engine import regions

    return [
        Audited(
            re.compile(regions._chain(chain, then)),
            f"regions._chain({chain}, {name})",
            frozenset({"finditer"}),
        )
        for chain in (["torch", "cuda", "synchronize"], ["x"])
        for name, then in (("CALLED", regions.CALLED), ("ASSIGNED", regions.ASSIGNED), ("word", ""))
    ]


def _units(pattern: re.Pattern) -> Iterator[str]:
    """The strings to repeat: each character of the pattern and of ALWAYS, and each piece of two
    or three characters of the pattern's text."""
    source = pattern.pattern.decode("latin-1") if isinstance(pattern.pattern, bytes) else pattern.pattern
    literal = re.sub(
        r"\\[AbBdDsSwWZ]|\\.|[\[\]()?*+{}|^$]", lambda m: m[0][1:] if len(m[0]) == 2 else "", source
    )
    seen = set()
    for unit in [*ALWAYS, *literal, *(literal[i : i + k] for k in (2, 3) for i in range(len(literal)))]:
        if unit and unit not in seen:
            seen.add(unit)
            yield unit


def _seconds(audited: Audited, text: str | bytes) -> float:
    """The slowest of the ways the code calls the pattern, on text; inf past CAP_S."""
    start = time.perf_counter()
    signal.setitimer(signal.ITIMER_REAL, CAP_S)
    try:
        for method in audited.methods:
            if method in ("match", "fullmatch"):
                getattr(audited.pattern, method)(text)
            else:  # any search: from every position, as finditer, sub and split do
                for _ in audited.pattern.finditer(text):  # type: ignore[arg-type]
                    pass
    except _Capped:
        return float("inf")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return time.perf_counter() - start


def _lead(pattern: re.Pattern) -> str:
    """The literal text every match starts with (`torch` in `torch\\s*\\(`): the adversarial
    text follows it, where the engine's backtracking starts."""
    source = pattern.pattern.decode("latin-1") if isinstance(pattern.pattern, bytes) else pattern.pattern
    if pattern.flags & (re.IGNORECASE | re.VERBOSE) or "|" in source:
        return ""
    lead = re.match(r"(?:\\[^A-Za-z0-9]|[^\\.^$*+?{}\[\]|()])*", source)[0]  # type: ignore[index]
    if lead and source[len(lead) : len(lead) + 1] in ("*", "?", "{"):
        lead = lead[:-1]  # its last character is optional
    return re.sub(r"\\(.)", r"\1", lead)


def _text(pattern: re.Pattern, lead: str, unit: str, breaker: str, length: int) -> str | bytes:
    text = lead + unit * (length // len(unit)) + breaker
    return text.encode("latin-1", "replace") if isinstance(pattern.pattern, bytes) else text


def audit(
    found: list[Audited] | None = None, progress: Callable[[Audited, int], None] = lambda audited, slow: None
) -> tuple[int, int, list[Slow]]:
    """(patterns, texts tried, the slow ones: capped, or growing faster than linearly)."""
    found = patterns() if found is None else found
    previous = signal.signal(signal.SIGALRM, _raise_capped)
    slow, tried = [], 0
    try:
        for audited in found:
            pattern = audited.pattern
            for lead, unit, breaker in product({"", _lead(pattern)}, _units(pattern), BREAKERS):
                tried += 1
                texts = tuple(_text(pattern, lead, unit, breaker, n) for n in (SHORT, LONG))
                timed = _timed(audited, texts)
                if _grows(*timed) and timed[1] != float("inf"):  # a busy machine can stall a
                    timed = _timed(audited, texts)  # measurement: a slow pattern is slow twice
                if _grows(*timed):
                    slow.append(Slow(audited, repr(lead + unit + breaker), *timed))
            progress(audited, len(slow))
    finally:
        signal.signal(signal.SIGALRM, previous)
    return len(found), tried, slow


def _timed(audited: Audited, texts: tuple[str | bytes, ...]) -> tuple[float, float]:
    """Seconds on the short text and on the long one (the long is not tried past the cap)."""
    short = _seconds(audited, texts[0])
    return short, _seconds(audited, texts[1]) if short < CAP_S else short


def _grows(short: float, long: float) -> bool:
    """Capped, or growing faster than linearly from the short text to the long one."""
    return long == float("inf") or (long > NOISE_S and long > RATIO * max(short, 1e-6))


def main() -> None:
    start = time.perf_counter()
    count, tried, slow = audit(
        progress=lambda audited, slow: print(f"{audited.where}: {slow} slow so far", flush=True)
    )
    for s in slow:
        where, pattern, methods = s.audited.where, s.audited.pattern.pattern, sorted(s.audited.methods)
        print(f"{where} {pattern!r} {methods} on {s.text}: {s.short_s:.4f} s -> {s.long_s:.4f} s")
    print(f"{count} patterns, {tried} texts, {len(slow)} slow, {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
