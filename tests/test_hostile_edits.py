"""Edits that must not make a file worse than it was: the bytes libcst drops put back, torch_npu
imported where the file imports torch (so a file that runs without torch still does), a
requirements file given a line pip still accepts, or told why it gets none, and a shell or make
variable renamed everywhere it is read or nowhere."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from npu_migrate.engine.source import migrate_source
from npu_migrate.handlers.dependencies import migrate_requirements
from npu_migrate.handlers.embedded_shell import migrate_makefile
from npu_migrate.handlers.shell import migrate_shell
from npu_migrate.rules.testing import ALL_FIXES

from .test_engine import INDEX, SAFE


def migrated(code: str) -> str:
    new = migrate_source(code.encode(), INDEX, SAFE).new_source
    assert new is not None, "nothing was fixed"
    return new.decode()


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (  # a page break before a definition, the import added right before it
            "import torch\n\x0cdef f(x):\n    return x.cuda()\n",
            "import torch\nimport torch_npu\n\x0cdef f(x):\n    return x.npu()\n",
        ),
        (  # inside a block, on the line edited and on one left alone
            "import torch\nif x:\n    y = 1\n\x0c    z = y.cuda()\n\x0c    w = 2\n",
            "import torch\nimport torch_npu\nif x:\n    y = 1\n\x0c    z = y.npu()\n\x0c    w = 2\n",
        ),
        ("\x0cimport torch\nx.cuda()\n", "\x0cimport torch\nimport torch_npu\nx.npu()\n"),  # the file's start
        ("import torch\rx.cuda()\r", "import torch\rimport torch_npu\rx.npu()\r"),  # bare CR, to the last
    ],
)
def test_what_libcst_drops_is_put_back(before: str, after: str) -> None:
    assert migrated(before) == after


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (  # `.npu()` on the line that imports torch runs before a line added after it would
            "import torch; x = torch.zeros(1).cuda()\n",
            "import torch; import torch_npu; x = torch.zeros(1).npu()\n",
        ),
        (  # torch is optional: the module imports without it
            "try:\n    import torch\nexcept ImportError:\n    torch = None\n\n"
            "def f(x):\n    return x.cuda()\n",
            "try:\n    import torch\n    import torch_npu\nexcept ImportError:\n    torch = None\n\n"
            "def f(x):\n    return x.npu()\n",
        ),
        (  # imported only where it is used
            "import os\n\ndef f():\n    import torch\n    return torch.zeros(1).cuda()\n",
            "import os\n\ndef f():\n    import torch\n    import torch_npu\n"
            "    return torch.zeros(1).npu()\n",
        ),
        (  # only for type checkers there: the function's import is the one that runs
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n\n"
            "def f(x):\n    import torch\n    return x.cuda()\n",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n\n"
            "def f(x):\n    import torch\n    import torch_npu\n    return x.npu()\n",
        ),
        (  # a top-level import wins over the function's
            "import torch\n\ndef f():\n    import torch\n    return torch.zeros(1).cuda()\n",
            "import torch\nimport torch_npu\n\ndef f():\n    import torch\n    return torch.zeros(1).npu()\n",
        ),
    ],
)
def test_torch_npu_is_imported_where_torch_is(before: str, after: str) -> None:
    assert migrated(before) == after


def test_a_module_that_runs_without_torch_still_imports_without_it(tmp_path: Path) -> None:
    """Run, not read: the migrated module is imported where torch cannot be."""
    code = migrated(
        "try:\n    import torch\nexcept ImportError:\n    torch = None\n\n"
        "def lazy():\n    import torch.distributed as dist\n    dist.init_process_group('nccl')\n\n"
        "def to_gpu(x):\n    return x.cuda() if torch is not None else x\n\nAVAILABLE = torch is not None\n"
    )
    (tmp_path / "optional.py").write_text(code)
    no_torch = "import sys; sys.modules['torch'] = None; sys.modules['torch_npu'] = None; "
    run = subprocess.run(
        [sys.executable, "-c", no_torch + "import optional; print(optional.AVAILABLE)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (run.returncode, run.stdout) == (0, "False\n"), run.stderr


def requirements(text: str) -> tuple[str | None, list[str]]:
    result = migrate_requirements(text.encode(), INDEX, SAFE)
    held = [f.held.reason for f in result.findings if f.held is not None]
    return (result.new_source.decode() if result.new_source else None), held


def test_a_crlf_requirements_file_gets_a_crlf_line() -> None:
    new, _ = requirements("numpy==1.26.0\r\ntorch==2.1.0\r\n")
    assert new == "numpy==1.26.0\r\ntorch_npu==2.1.0.*\r\ntorch==2.1.0\r\n"


def test_a_last_line_without_a_break_takes_the_files() -> None:
    new, _ = requirements("numpy==1.26.0\r\ntorch==2.1.0")
    assert new == "numpy==1.26.0\r\ntorch_npu==2.1.0.*\r\ntorch==2.1.0"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("numpy==1.26.0 --hash=sha256:aa\ntorch==2.1.0 \\\n    --hash=sha256:bb\n", "hash-checking mode"),
        ("--require-hashes\ntorch==2.1.0\n", "hash-checking mode"),
        ("-r base.txt \\\ntorch==2.1.0\n", "inside a continued line"),
    ],
)
def test_no_line_pip_would_refuse_is_added(text: str, reason: str) -> None:
    assert requirements(text) == (None, [reason])


def test_no_hashed_requirement_is_edited() -> None:
    """Hashes pin the exact wheel: a CUDA build's pin or index changed in place stops the install
    as surely as a requirement added without its hash."""
    text = "--extra-index-url https://download.pytorch.org/whl/cu118\ntorch==2.1.0+cu118 --hash=sha256:aa\n"
    result = migrate_requirements(text.encode(), INDEX, ALL_FIXES)
    held = [f.held.reason if f.held else None for f in result.findings]
    assert result.new_source is None and len(held) == 3 and set(held) == {"hash-checking mode"}


def test_a_backslash_in_a_comment_continues_nothing() -> None:
    new, held = requirements("numpy  # see \\\ntorch==2.1.0\n# --hash=sha256:aa\n")
    assert (new, held) == ("numpy  # see \\\ntorch_npu==2.1.0.*\ntorch==2.1.0\n# --hash=sha256:aa\n", [])


SCRIPTS = {
    "heredoc": (
        "export CUDA_VISIBLE_DEVICES=0,1\ncat <<END\ndevices: $CUDA_VISIBLE_DEVICES\nEND\n",
        "export ASCEND_RT_VISIBLE_DEVICES=0,1\ncat <<END\ndevices: $ASCEND_RT_VISIBLE_DEVICES\nEND\n",
    ),
    "read, for, printf -v, -v": (
        "export CUDA_VISIBLE_DEVICES=0\nread -r CUDA_VISIBLE_DEVICES <<< 3\n"
        "for CUDA_VISIBLE_DEVICES in 4 $CUDA_VISIBLE_DEVICES; do echo $CUDA_VISIBLE_DEVICES; done\n"
        'printf -v CUDA_VISIBLE_DEVICES "%s" 5\n'
        "[[ -v CUDA_VISIBLE_DEVICES ]] && printenv CUDA_VISIBLE_DEVICES\n"
        'echo "set CUDA_VISIBLE_DEVICES to choose"\n',
        "export ASCEND_RT_VISIBLE_DEVICES=0\nread -r ASCEND_RT_VISIBLE_DEVICES <<< 3\n"
        "for ASCEND_RT_VISIBLE_DEVICES in 4 $ASCEND_RT_VISIBLE_DEVICES; do "
        "echo $ASCEND_RT_VISIBLE_DEVICES; done\n"
        'printf -v ASCEND_RT_VISIBLE_DEVICES "%s" 5\n'
        "[[ -v ASCEND_RT_VISIBLE_DEVICES ]] && printenv ASCEND_RT_VISIBLE_DEVICES\n"
        'echo "set CUDA_VISIBLE_DEVICES to choose"\n',  # a message: reported, left as written
    ),
    "eval": ("export CUDA_VISIBLE_DEVICES=0,1\neval 'echo $CUDA_VISIBLE_DEVICES'\n", None),
    "quoted heredoc": (
        "export CUDA_VISIBLE_DEVICES=0,1\nbash <<'END'\necho $CUDA_VISIBLE_DEVICES\nEND\n",
        None,
    ),
}


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_variable_is_renamed_everywhere_it_is_read_or_nowhere(tmp_path: Path, name: str) -> None:
    """Run, not read: the migrated script prints what the original printed."""
    before, after = SCRIPTS[name]
    (tmp_path / "run.sh").write_text(before)
    result = migrate_shell(before.encode(), INDEX, SAFE)
    assert (result.new_source.decode() if result.new_source else None) == after
    if after is None:
        assert all(f.held for f in result.findings if f.rule.code == "NPU751")
        return
    outputs = []
    for script in (before, after):
        (tmp_path / "run.sh").write_text(script)
        run = subprocess.run(["bash", "run.sh"], cwd=tmp_path, capture_output=True, text=True, check=True)
        outputs.append(run.stdout.replace("ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"))
    assert outputs[0] == outputs[1] != ""


MAKEFILE = (
    "CUDA_VISIBLE_DEVICES ?= 0,1\nexport CUDA_VISIBLE_DEVICES\nifdef CUDA_VISIBLE_DEVICES\n"
    "DEV := $(CUDA_VISIBLE_DEVICES)\nendif\n"
    "ifeq ($(origin CUDA_VISIBLE_DEVICES), file)\nFROM := makefile\nendif\n"
    "show:\n\t@echo $(DEV) $(FROM) $$CUDA_VISIBLE_DEVICES\n"
)


def test_a_makefile_renames_what_ifdef_and_origin_name(tmp_path: Path) -> None:
    new = migrate_makefile(MAKEFILE.encode(), INDEX, SAFE).new_source
    assert new is not None and b"CUDA" not in new
    outputs = []
    for text in (MAKEFILE.encode(), new):
        (tmp_path / "Makefile").write_bytes(text)
        run = subprocess.run(["make", "-s", "show"], cwd=tmp_path, capture_output=True, text=True, check=True)
        outputs.append(run.stdout)
    assert outputs[0] == outputs[1] == "0,1 makefile 0,1\n"


def test_a_makefile_holds_the_rename_where_its_text_reads_the_name() -> None:
    text = (
        b"CUDA_VISIBLE_DEVICES ?= 0\nexport CUDA_VISIBLE_DEVICES\nY := $(shell echo $$CUDA_VISIBLE_DEVICES)\n"
    )
    result = migrate_makefile(text, INDEX, SAFE)
    assert result.new_source is None
    assert [f.held.reason for f in result.findings if f.held] == ["renamed only in part"] * 2 + [
        "spelled in text"
    ]


def test_a_script_bash_refuses_is_not_read_rather_than_a_tool_error() -> None:
    """The shell grammar is more tolerant than bash: where bash -n refuses the script as it is,
    fixes it would refuse too are the input's fault (fuzz case: a Python line spliced in)."""
    script = b"#!/bin/bash\nF.f(q, k)#!/bin/bash\nexport CUDA_VISIBLE_DEVICES=0\n"
    result = migrate_shell(script, INDEX, SAFE)
    assert result.error and "not a script bash can parse" in result.error and not result.tool_failed


def test_a_makefile_recipe_with_make_functions_is_read_as_the_shell_make_runs(tmp_path: Path) -> None:
    """accelerate's Makefile passes `$(if $(IS_GITHUB_CI),--report-log "$(V)_core.log",)` in a
    recipe: make expands it before the shell runs, but read as shell `$(if` is no command, and the
    whole file was "not a script bash can parse". The call reads as one word; the variables it
    reads are still seen (a rename where one is set reaches them)."""
    text = (
        "CUDA_VISIBLE_DEVICES ?= 0,1\nexport CUDA_VISIBLE_DEVICES\n"
        "show:\n\t@echo $$CUDA_VISIBLE_DEVICES \\\n"
        '\t  $(if $(CI),--report-log "$(CUDA_VISIBLE_DEVICES)_core.log",none) $(shell echo x)\n'
    )
    new = migrate_makefile(text.encode(), INDEX, SAFE).new_source
    assert new is not None and b"CUDA" not in new
    outputs = []
    for made in (text.encode(), new):
        (tmp_path / "Makefile").write_bytes(made)
        run = subprocess.run(["make", "-s", "show", "CI=1"], cwd=tmp_path, capture_output=True, text=True)
        outputs.append(run.stdout)
    assert outputs[0] == outputs[1] == "0,1 --report-log 0,1_core.log x\n"


# The Makefile cookiecutter-pypackage generates (InternVL's clip_benchmark carries it): Python
# held in `define` blocks, its indented lines led by tabs as a recipe's are.
DEFINES = """define PRINT_HELP_PYSCRIPT
import re, sys

for line in sys.stdin:
\tmatch = re.match(r'^([a-zA-Z_-]+):.*?## (.*)$$', line)
\tif match:
\t\ttarget, help = match.groups()
\t\tprint("%-8s %s" % (target, help))
endef
export PRINT_HELP_PYSCRIPT

CUDA_VISIBLE_DEVICES ?= 0,1
export CUDA_VISIBLE_DEVICES

help: ## the targets
\t@python3 -c "$$PRINT_HELP_PYSCRIPT" < $(MAKEFILE_LIST)

show: ## the devices
\t@echo $$CUDA_VISIBLE_DEVICES
"""


def test_a_makefile_with_define_blocks_is_read_and_still_makes_the_same(tmp_path: Path) -> None:
    """A `define` block's tab-led lines were read as a recipe's shell: the whole file was "not a
    script bash can parse" and its CUDA variables went unreported."""
    result = migrate_makefile(DEFINES.encode(), INDEX, SAFE)
    assert result.error is None
    assert result.new_source is not None and b"CUDA" not in result.new_source
    outputs = []
    for text in (DEFINES.encode(), result.new_source):
        (tmp_path / "Makefile").write_bytes(text)
        make = ["make", "-s"]
        made = [subprocess.run([*make, target], cwd=tmp_path, capture_output=True, text=True, check=True)
                for target in ("help", "show")]  # fmt: skip
        outputs.append([run.stdout for run in made])
    assert outputs[0] == outputs[1] == ["help     the targets\nshow     the devices\n", "0,1\n"]
