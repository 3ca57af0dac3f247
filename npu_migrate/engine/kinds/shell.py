"""Match kinds for shell launch scripts (`*.sh`, `*.bash`, a sh/bash shebang): `shell_env`, a
variable whose name the regex matches where a script sets, exports or expands it (fixed by
substitution on the name), `shell_word`, an argument a command is given (a word, or a quoted
string's text, optionally only after a given flag; fixed by substitution), `shell_command`, a
command by its name (fixed by a template that replaces a plain use, one without arguments), and
`shell_pipeline`, commands joined by `|` (fixed by a template that replaces the whole pipeline).
The Python transformer has nothing to do with them: npu_migrate/handlers/shell.py finds them in a
script's syntax tree."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pydantic import Field

from npu_migrate.engine.kinds.fields import Regex, Strict
from npu_migrate.engine.kinds.site import SiteKind, full_match

if TYPE_CHECKING:
    from npu_migrate.engine.sites import Site


class ShellEnvMatch(Strict):
    shell_env: Regex = Field(description="Regex the whole variable name must match.")


class ShellWordMatch(Strict):
    shell_word: Regex = Field(description="Regex an argument's whole text must match.")
    after: Regex | None = Field(
        default=None,
        description="Regex the argument just before it must match whole: the flag whose value it is "
        "(`--distributed-backend nccl`).",
    )


class ShellCommandMatch(Strict):
    shell_command: str = Field(pattern=r"^[\w.+-]+$", description="The command's name, as a script runs it.")


class ShellPipelineMatch(Strict):
    shell_pipeline: Regex = Field(
        description="Regex a whole pipeline's text must match (its commands and the `|` between them, "
        "spaced as the script spells them)."
    )


class ShellEnvKind(SiteKind):
    key = "shell_env"
    schema = ShellEnvMatch
    fixes = frozenset({"substitute"})
    content: ClassVar[str] = "shell"
    one_name: ClassVar[bool] = True

    @staticmethod
    def keys(match: ShellEnvMatch) -> set[str]:
        return {f"shell_env:{match.shell_env}"}

    @staticmethod
    def hit(match: ShellEnvMatch, site: Site) -> bool:
        return site.kind == "variable" and full_match(match.shell_env, site.text)


class ShellCommandKind(SiteKind):
    key = "shell_command"
    schema = ShellCommandMatch
    fixes = frozenset({"template"})
    content: ClassVar[str] = "shell"

    @staticmethod
    def keys(match: ShellCommandMatch) -> set[str]:
        return {f"shell_command:{match.shell_command}"}

    @staticmethod
    def hit(match: ShellCommandMatch, site: Site) -> bool:
        return site.kind == "command" and site.text == match.shell_command


class ShellWordKind(SiteKind):
    key = "shell_word"
    schema = ShellWordMatch
    fixes = frozenset({"substitute"})
    content: ClassVar[str] = "shell"

    @staticmethod
    def keys(match: ShellWordMatch) -> set[str]:
        return {f"shell_word:{match.shell_word}" + (f" after {match.after}" if match.after else "")}

    @staticmethod
    def hit(match: ShellWordMatch, site: Site) -> bool:
        if site.kind != "word" or not full_match(match.shell_word, site.text):
            return False
        return match.after is None or full_match(match.after, site.facts.get("after", ""))


class ShellPipelineKind(SiteKind):
    key = "shell_pipeline"
    schema = ShellPipelineMatch
    fixes = frozenset({"template"})
    content: ClassVar[str] = "shell"

    @staticmethod
    def keys(match: ShellPipelineMatch) -> set[str]:
        return {f"shell_pipeline:{match.shell_pipeline}"}

    @staticmethod
    def hit(match: ShellPipelineMatch, site: Site) -> bool:
        return site.kind == "pipeline" and full_match(match.shell_pipeline, site.text)
