"""Words that hold a fix wherever the run mentions them (Rule.hold_in_files_with): torch_npu's
fused optimizers built in one file, `zero_grad(set_to_none=True)` called in the trainer of
another. Before the per-file pass, each Python file that may make such a fix learns which of
the words other files of the run mention (ModulePath.words_elsewhere), so that one pass decides
it. Light to import: a warm run reads the holds from the result cache, without the rules."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from npu_migrate.model import SourceFile
from npu_migrate.prefilter import Prefilter, word_counts


@dataclass(frozen=True)
class WordHold:
    """A rule that holds its fix where a file of the run mentions one of `words`
    (Rule.hold_in_files_with), with that rule's own prefilter: the files that may make the fix."""

    words: tuple[str, ...]
    prefilter: Prefilter

    def may_make_its_fix(self, file: SourceFile) -> bool:
        data = file.data or b""
        if not self.prefilter.may_spell(data):
            return False
        text = data.decode("latin-1")  # as the engine's prefilter reads it
        return self.prefilter.may_match_module(text, word_counts(text), file.module)

    def to_json(self) -> dict[str, Any]:
        return {"words": list(self.words), "prefilter": self.prefilter.to_json()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WordHold:
        return cls(tuple(data["words"]), Prefilter.from_json(data["prefilter"]))


def words_elsewhere(files: Sequence[SourceFile], holds: Sequence[WordHold]) -> list[SourceFile]:
    """The run's Python files, each that may make a fix of one of `holds` knowing the hold's
    words that other files mention, with the first such file (ModulePath.words_elsewhere)."""
    mentioning: dict[str, list[SourceFile]] = {}  # each word, the files that mention it
    known = []
    for file in files:
        wanted = {w for hold in holds if hold.may_make_its_fix(file) for w in hold.words}
        mentioned = {}
        for word in sorted(wanted):
            if word not in mentioning:  # every file is searched once per word
                mentioning[word] = [f for f in files if _mentions(f.data or b"", word)]
            where = next((f for f in mentioning[word] if f is not file), None)
            if where is not None:
                mentioned[word] = where.display
        module = replace(file.module, words_elsewhere=tuple(sorted(mentioned.items())))
        known.append(replace(file, module=module) if mentioned else file)
    return known


def _mentions(data: bytes, word: str) -> bool:
    spelled = word.encode()
    return spelled in data and re.search(rb"\b%s\b" % re.escape(spelled), data) is not None
