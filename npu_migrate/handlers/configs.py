"""YAML and JSON configs as the `setting` rules see them (DeepSpeed, accelerate, training
configs): every mapping key, and the value it holds, located to the byte by YAML's own parser
(JSON is YAML), so that a fix edits one value and nothing else: indentation, comments, quoting
and key order stay as they were. A file that spells no rule's key is not parsed at all (a
tokenizer's vocabulary is JSON too)."""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass

import yaml

from npu_migrate.engine.index import RuleIndex
from npu_migrate.engine.kinds.setting import SettingMatch
from npu_migrate.engine.kinds.site import found
from npu_migrate.engine.sites import Site, match_sites, site_result
from npu_migrate.engine.suppressions import Suppressions
from npu_migrate.model import NO_MODULE, Applicability, FileResult, Hold, ModulePath

ESCAPED = Hold("spelled with escapes", "the value is spelled with escapes: edit it by hand")
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_NOT_YAML = re.compile("[^\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


@dataclass(frozen=True)
class Spelled:
    """A YAML scalar's place in the file: the bytes of its text (inside any quotes), and why it
    may not be edited there (None: its text is spelled as it is, without escapes)."""

    start: int
    end: int
    held: Hold | None


def spelled(text: str, node: yaml.Node) -> Spelled:
    start, end = node.start_mark.index, node.end_mark.index
    raw = text[start:end]
    quoted = raw[:1] in ("'", '"') and isinstance(node, yaml.ScalarNode)
    inner = raw[1:-1] if quoted else raw
    plain = not isinstance(node, yaml.ScalarNode) or inner == node.value
    begin = _byte_offsets(text).of(start + int(quoted))  # marks count characters; sites bytes
    return Spelled(begin, begin + len(inner.encode()), None if plain else ESCAPED)


class _ByteOffsets:
    """Character offsets to UTF-8 byte offsets in O(log n) each, where encoding the text up to
    each of a large file's 100,000 scalars took seconds: only its non-ASCII characters widen."""

    def __init__(self, text: str) -> None:
        self._wide: list[int] = []  # where each non-ASCII character is
        self._extra: list[int] = []  # the bytes they add, up to and with each
        for wide in _NON_ASCII.finditer(text):
            self._wide.append(wide.start())
            self._extra.append((self._extra[-1] if self._extra else 0) + len(wide[0].encode()) - 1)

    def of(self, index: int) -> int:
        before = bisect.bisect_left(self._wide, index)
        return index + (self._extra[before - 1] if before else 0)


@functools.lru_cache(maxsize=1)  # a file's scalars are placed one after another
def _byte_offsets(text: str) -> _ByteOffsets:
    return _ByteOffsets(text)


_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def compose(text: str) -> yaml.Node | None:
    """Every document of a YAML stream under one node (a stream of one document: that document)."""
    documents = list(yaml.compose_all(text, Loader=LOADER))
    if len(documents) == 1:
        return documents[0]
    return yaml.SequenceNode("tag:yaml.org,2002:seq", [d for d in documents if d is not None])


def migrate_config(
    data: bytes, index: RuleIndex, enabled: frozenset[Applicability], where: ModulePath = NO_MODULE
) -> FileResult:
    settings = [r.match.setting for r in index.rules if isinstance(r.match, SettingMatch)]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return FileResult.undecodable(data, exc)
    if not any(found(setting, text) for setting in settings):
        return FileResult()
    try:
        as_json = _as_yaml(text)  # a JSONC file may open with a comment before its `{`
        root = compose(as_json if as_json.lstrip().startswith(("{", "[")) else text)
        sites = list(_sites(text, root))
    except yaml.YAMLError as exc:
        return FileResult(error=f"not YAML or JSON: {str(exc).splitlines()[0]}")
    except RecursionError:
        return FileResult(error="nested too deeply to parse")
    suppressions = Suppressions.in_lines(data, _scalar_spans(text, root))  # YAML's comments (JSON has none)
    matched = match_sites(data, sites, index, enabled, {"config"}, suppressions=suppressions)
    return site_result(matched, data, suppressions)


def _as_yaml(json_text: str) -> str:
    """JSON as YAML's reader takes it, character for character: a tab (JSON's indentation) and a
    control character JSON allows in a string but YAML refuses are spaces (such a string is then
    spelled differently from its value, and held); the comments of JSON with comments (JSONC:
    VS Code's devcontainer.json, tsconfig) are spaces too, their line breaks kept."""
    return _JSONC_COMMENT.sub(_blanked, _NOT_YAML.sub(" ", json_text))


# A JSON string (skipped whole, so that `//` in a URL is no comment), or a comment. One left open
# runs to its line's end (a string) or the file's (a comment): each start scans on once, not again
# from every later quote.
_JSONC_COMMENT = re.compile(r'"(?:[^"\\\n]|\\.)*"?|//[^\n]*|/\*.*?(?:\*/|\Z)', re.DOTALL)


def _blanked(match: re.Match[str]) -> str:
    text = match.group()
    return text if text.startswith('"') else re.sub(r"[^\n]", " ", text)


def _sites(text: str, node: yaml.Node | None, seen: set[int] | None = None) -> Iterator[Site]:
    """Each key of each mapping, and the value it holds: a scalar's text, or a list of scalars as
    it is written (`[0, 1]`). A node an alias names again is the anchor's, where it is written:
    visited once (a tree of aliases would otherwise be visited once per path to each node)."""
    seen = set() if seen is None else seen
    if node is None or id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _sites(text, item, seen)
    if not isinstance(node, yaml.MappingNode):
        return
    for key, value in node.value:
        if not isinstance(key, yaml.ScalarNode):
            continue
        facts = {"KEY": key.value}
        place = spelled(text, key)
        yield Site("key", place.start, place.end, key.value, facts, held=place.held)
        if isinstance(value, yaml.ScalarNode) or _scalars(value):
            place = spelled(text, value)
            shown = (
                value.value
                if isinstance(value, yaml.ScalarNode)
                else text[value.start_mark.index : value.end_mark.index]
            )
            yield Site("value", place.start, place.end, shown, facts, held=place.held)
        yield from _sites(text, value, seen)


def _scalar_spans(text: str, root: yaml.Node | None) -> Iterator[tuple[int, int]]:
    """The byte spans of the document's scalars: a `#` inside one (a quoted value) is its text.
    Walked only where a file holds a suppression (Suppressions.in_lines asks for them then)."""
    stack: list[yaml.Node] = [root] if root is not None else []
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            place = spelled(text, node)
            yield place.start, place.end
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            stack.extend(part for pair in node.value for part in pair)


def _scalars(node: yaml.Node) -> bool:
    """A list of scalars only (a device list)."""
    return isinstance(node, yaml.SequenceNode) and all(isinstance(i, yaml.ScalarNode) for i in node.value)
