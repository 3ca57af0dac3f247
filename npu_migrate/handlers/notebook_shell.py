"""The shell a notebook runs: its `!` lines, the bodies of its `%%bash` cells, `%env` and `%pip`
as one script for the shell handler (line k of it is the notebook's k-th magic line, at the same
columns), so that `!CUDA_VISIBLE_DEVICES=0 python train.py`, `%env CUDA_VISIBLE_DEVICES=0` and
`!nvcc --version` meet the rules they would in a launch script. A line bash cannot read (IPython's
own `{expression}` syntax) is left to the Python stand-in that the notebook handler gives it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from npu_migrate.engine.index import RuleIndex
from npu_migrate.handlers.embedded_shell import blanked
from npu_migrate.handlers.shell import migrate_script, unparsable_line
from npu_migrate.model import Applicability, Finding


@dataclass
class Shell:
    """What the rules make of a notebook's shell: findings by magic line (`line` is the index of
    the magic, from 1), the magic lines rewritten (None: unchanged), the magics bash read."""

    findings: list[Finding] = field(default_factory=list)
    rewritten: list[str] | None = None
    read: set[int] = field(default_factory=set)
    error: str | None = None


def shell_view(line: str, in_shell: bool) -> bytes:
    """A magic line as bash reads what IPython runs of it, each byte at its place; blank where
    IPython runs no shell. `in_shell`: a line of a `%%bash` cell, or one a `!` line continues."""
    raw = line.encode("utf-8")
    if in_shell:
        return raw
    lead = len(raw) - len(raw.lstrip())
    body = raw[lead:]
    if body.startswith(b"!"):
        bangs = 2 if body.startswith(b"!!") else 1
        return raw[:lead] + b" " * bangs + _PYTHON_IN_SHELL.sub(lambda m: b"x" * len(m[0]), body[bangs:])
    if re.match(rb"%(pip|conda)\s", body):
        return raw[:lead] + b" " + body[1:]
    assignment = re.match(rb"%env[ \t]+(\w+)(=|[ \t]+)", body)
    if assignment:  # IPython's value is the rest of the line, spaces and all: only its name is shell
        start, end = lead + assignment.start(1), lead + assignment.end(1)
        return blanked(raw[:start]) + raw[start:end] + b"=" + blanked(raw[end + 1 :])
    return blanked(raw)


# IPython's `{expression}` in a `!` line: Python's value, a word to bash (which tree-sitter's
# grammar misreads as a group)
_PYTHON_IN_SHELL = re.compile(rb"(?<!\$)\{[^{}\s][^{}]*\}")


def migrate_magics(
    magics: list[str], views: list[bytes], index: RuleIndex, enabled: frozenset[Applicability]
) -> Shell:
    """The shell rules over the magic lines; lines bash cannot read are blanked, one at a time."""
    if not any(view.strip() for view in views):
        return Shell()
    lines = [m if m.endswith(("\n", "\r")) else m + "\n" for m in magics]
    data = "".join(lines).encode("utf-8")
    views = [v if v.endswith((b"\n", b"\r")) else v + b"\n" for v in views]
    if unparsable_line(b"".join(views)) is not None:  # the lines bash reads alone, then
        views = [view if unparsable_line(view) is None else blanked(view) for view in views]
        if unparsable_line(b"".join(views)) is not None:
            return Shell()
    result = migrate_script(data, b"".join(views), index, enabled)
    if result.error:
        return Shell(error=result.error)
    read = {k for k, view in enumerate(views) if view.strip()}
    rewritten = None
    if result.new_source is not None:
        new = result.new_source.decode("utf-8").splitlines(keepends=True)
        rewritten = [
            n if m.endswith(("\n", "\r")) else n.rstrip("\r\n") for n, m in zip(new, magics, strict=True)
        ]
    return Shell(result.findings, rewritten, read)
