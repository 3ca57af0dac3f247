"""What the files of one run decide for each other, read from their results after the per-file
pass:

* the names some file keeps calling (a rename the run does not make there: a dual-path file, a
  guard hold), so that a test's mock of that name is not renamed away from the code it stands in
  for (mmengine's test mocks `torch.cuda.max_memory_allocated`, which its device utilities,
  keeping an NPU path beside CUDA, still call), and is renamed where the code it imports renames
  it;
* the attributes some file keeps comparing with CUDA (`strategy.parallel_devices[0].type ==
  "cuda"`, held in Lightning's connector: Lightning has no NPU accelerator), so that a value
  another file hands on under that name keeps its CUDA (Lightning's test builds
  `DDPStrategy(parallel_devices=[torch.device("cuda", i) ...])` and expects the connector to see
  a GPU). Files are linked by the attribute's name, so names too common to link by (`device`,
  `device_type`) are left out;
and, before that pass, the words a fix is held for that other files mention
(npu_migrate.word_holds)."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field

from npu_migrate.model import FileOutcome, Finding

_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_QUOTED = re.compile(rf"[rRuU]?(['\"])(?P<name>{_DOTTED.pattern})\1")


@dataclass
class Calls:
    """Per dotted name a rename rule matched: where the run keeps it (module -> `file:line`) and
    the modules where it renames it."""

    kept: dict[str, dict[str, str]] = field(default_factory=dict)
    renamed: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, outcomes: Iterable[FileOutcome], renaming: Collection[str]) -> Calls:
        calls = cls()
        for outcome in outcomes:
            module = module_name(outcome)
            for finding in outcome.result.findings:
                if finding.rule.code not in renaming or not _DOTTED.fullmatch(finding.code):
                    continue
                if not fixed(finding):
                    calls.kept.setdefault(finding.code, {}).setdefault(
                        module, f"{outcome.file.display}:{finding.line}"
                    )
                else:
                    calls.renamed.setdefault(finding.code, set()).add(module)
        return calls

    def keeper(self, name: str, imported: list[str]) -> str | None:
        """Where the code a mock of `name` stands in for keeps calling it, or None where it renames
        it: decided by the modules the mocking file imports (those it names, then those under
        them), else by whether any file of the run keeps it."""
        kept, renamed = self.kept.get(name, {}), self.renamed.get(name, set())
        for reached in (_exactly(imported), _under(imported)):
            keeps = [where for module, where in kept.items() if reached(module)]
            if keeps:
                return keeps[0]
            if any(reached(module) for module in renamed):
                return None
        return next(iter(kept.values()), None)


# A string a comparison asks a device about: "cuda", "cuda:0".
_CUDA_STRING = re.compile(r"^cuda(?::\d+)?$")
# Attribute names every device-handling file uses, and pytest's fixture parameter (a parametrized
# fixture's `request.param == "cuda"`): a comparison of one links no file to another.
_TOO_COMMON = re.compile(r"^(?:type|param|(?:\w+_)?device(?:_type)?|device_\w+)$")


def kept_comparisons(outcomes: Iterable[FileOutcome]) -> dict[str, str]:
    """The attributes (by name) whose device the run keeps comparing with CUDA, with where and
    how (each file's FileResult.cuda_comparisons)."""
    found: dict[str, str] = {}
    for outcome in outcomes:
        for name, line, text in outcome.result.cuda_comparisons:
            found.setdefault(name, f"{outcome.file.display}:{line} (`{text}`)")
    return found


def cuda_comparisons(
    findings: Iterable[Finding], tree_of: Callable[[], ast.Module | None]
) -> list[tuple[str, int, str]]:
    """A file's comparisons `x.NAME == "cuda"` or `x.NAME[0].type == "cuda"` whose CUDA string
    keeps its CUDA (held, or left for a human): (NAME, line, the comparison). `tree_of`: the
    file's stdlib tree, asked for only where a CUDA string is kept."""
    lines = {f.line for f in findings if _kept_cuda_string(f)}
    tree = tree_of() if lines else None
    if tree is None:
        return []
    found: dict[str, tuple[str, int, str]] = {}
    for node in _nodes_on(tree, lines):
        if isinstance(node, ast.Compare) and node.lineno in lines and _asks_cuda(node):
            name = _compared_attribute(node)
            if name is not None and not _TOO_COMMON.match(name):
                found.setdefault(name, (name, node.lineno, ast.unparse(node)))
    return list(found.values())


def _nodes_on(tree: ast.AST, lines: Collection[int]) -> Iterator[ast.AST]:
    """The nodes under `tree` whose lines hold one of `lines` (a node without lines is walked
    through): a walk that skips what lies elsewhere."""
    pending = [tree]
    while pending:
        for child in ast.iter_child_nodes(pending.pop()):
            first, last = getattr(child, "lineno", None), getattr(child, "end_lineno", None)
            if first is None or last is None or any(first <= line <= last for line in lines):
                yield child
                pending.append(child)


def hands_on(source: bytes, names: Collection[str]) -> bool:
    """Whether the file may hand a value on as one of `names` (`name=` in a call)."""
    text = source.decode("latin-1")
    return any(re.search(rf"\b{re.escape(name)}\s*=(?!=)", text) for name in names)


def _kept_cuda_string(finding: Finding) -> bool:
    """A quoted CUDA device string the run keeps as it is (held, or left for a human)."""
    code = finding.code
    quoted = len(code) > 2 and code[0] == code[-1] in "'\""
    return not fixed(finding) and quoted and _CUDA_STRING.match(code[1:-1]) is not None


def _asks_cuda(node: ast.Compare) -> bool:
    strings = [o.value for o in [node.left, *node.comparators] if isinstance(o, ast.Constant)]
    return any(isinstance(value, str) and _CUDA_STRING.match(value) for value in strings)


def _compared_attribute(node: ast.Compare) -> str | None:
    """NAME in `x.NAME == "cuda"`, `x.NAME.type == "cuda"`, `x.NAME[0].type == "cuda"`."""
    for operand in [node.left, *node.comparators]:
        if isinstance(operand, ast.Attribute) and operand.attr == "type":
            operand = operand.value
        while isinstance(operand, ast.Subscript):
            operand = operand.value
        if isinstance(operand, ast.Attribute):
            return operand.attr
    return None


def fixed(finding: Finding) -> bool:
    """Whether the run makes the finding's fix (in a scan: a default apply would)."""
    return finding.replacement is not None and finding.held is None


def module_name(outcome: FileOutcome) -> str:
    """The module a file is (a file outside any package: its stem, as its neighbours import it)."""
    return outcome.file.module.name or outcome.file.path.stem


def imported_modules(source: bytes) -> list[str]:
    """The modules a file imports (`import a.b`, `from a.b import c`: a.b), absolute ones only."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return []
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append(node.module)
    return found


def mocks_renamed(outcome: FileOutcome) -> list[str]:
    """The mock targets (quoted dotted names) the run renames in this file (or, in a scan, would)."""
    return [
        quoted.group("name")
        for f in outcome.result.findings
        if fixed(f) and (quoted := _QUOTED.fullmatch(f.code))
    ]


def _exactly(imported: list[str]) -> Callable[[str], bool]:
    return lambda module: module in imported


def _under(imported: list[str]) -> Callable[[str], bool]:
    return lambda module: any(module.startswith(name + ".") for name in imported)
