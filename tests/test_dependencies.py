"""Dependency files, each by its own grammar: requirements found where they are written (a
requirements file, pyproject.toml, setup.py, setup.cfg, a conda environment, a script's pip
install), fixes that edit only the requirement they are about, the torch_npu pin added where a
line can be and proposed where it cannot, and files without findings left byte-identical."""

from __future__ import annotations

import json
from pathlib import Path

from npu_migrate.engine.index import RuleIndex
from npu_migrate.model import Applicability, FileResult
from npu_migrate.pipeline import handler
from npu_migrate.rules.load import load_rules
from tests.fixture_cases import run_cli

EVERY_FIX = frozenset({Applicability.safe, Applicability.unsafe})
INDEX = RuleIndex(load_rules([], True))


def migrate(kind: str, text: str) -> FileResult:
    return handler(kind)(text.encode(), INDEX, EVERY_FIX)


def found(result: FileResult) -> list[tuple[int, int, str, str]]:
    return [(f.line, f.column, f.rule.code, f.code) for f in result.findings]


def test_pyproject_requirements_are_located_in_their_strings() -> None:
    text = (
        '[project]\nname = "x"\ndependencies = [\n  "torch==2.2.0",\n  \'xformers\',  # attention\n]\n'
        '[project.optional-dependencies]\nq = ["bitsandbytes"]\n'
        '[tool.poetry.dependencies]\npython = "^3.10"\nflash-attn = "^2.5"\n'
    )
    result = migrate("pyproject", text)
    assert found(result) == [
        (4, 4, "NPU761", "torch==2.2.0"),
        (5, 4, "NPU767", "xformers"),
        (8, 7, "NPU767", "bitsandbytes"),
        (11, 1, "NPU767", "flash-attn"),
    ]
    pin = result.findings[0]
    assert (
        pin.held is not None and pin.held.why.endswith("`torch_npu==2.2.0.*`") and result.new_source is None
    )


def test_setup_py_lists_names_and_escapes() -> None:
    text = (
        'from setuptools import setup\nBASE = ["triton"]\n'
        'setup(install_requires=BASE + ["apex", "bitsandbytes\\x00"])\n'
    )
    result = migrate("setup.py", text)
    assert found(result) == [(2, 10, "NPU769", "triton"), (3, 33, "NPU767", "apex")]


def test_setup_cfg_takes_the_requires_keys_only() -> None:
    text = (
        "[options]\ninstall_requires =\n    triton\n    numpy\npython_requires = >=3.9\n"
        "[flake8]\nignore = apex\n"
    )
    assert found(migrate("setup.cfg", text)) == [(3, 5, "NPU769", "triton")]


def test_conda_environment_channels_specs_and_pip_lines() -> None:
    text = (
        "channels:\n  - nvidia\ndependencies:\n  - cudatoolkit=11.8\n  - 'pytorch==2.1.0'\n"
        "  - pip:\n    - --extra-index-url https://download.pytorch.org/whl/cu118\n    - xformers\n"
    )
    result = migrate("conda", text)
    assert found(result) == [
        (2, 5, "NPU766", "nvidia"),
        (4, 5, "NPU764", "cudatoolkit=11.8"),
        (5, 6, "NPU761", "pytorch==2.1.0"),
        (7, 25, "NPU763", "https://download.pytorch.org/whl/cu118"),
        (8, 7, "NPU767", "xformers"),
    ]
    assert result.new_source is not None and b"/whl/cpu" in result.new_source, "the index is edited in place"
    assert result.new_source.replace(b"/whl/cpu", b"/whl/cu118") == text.encode()


def test_requirements_keep_comments_options_and_markers() -> None:
    text = (
        "-r base.txt\ntorch==2.1.0+cu118 --no-binary=:none:  # cluster\n\n"
        "torchaudio==2.1.0+cu118; python_version>'3.8'\n"
    )
    result = migrate("requirements", text)
    assert result.new_source is not None
    assert result.new_source.decode() == (
        "-r base.txt\ntorch_npu==2.1.0.*\ntorch==2.1.0 --no-binary=:none:  # cluster\n\n"
        "torchaudio==2.1.0; python_version>'3.8'\n"
    )


def test_a_pinned_torch_npu_settles_the_pin_and_unpinned_torch_says_why() -> None:
    assert found(migrate("requirements", "torch==2.4.0\ntorch_npu==2.4.0.post2\n")) == []
    unpinned = migrate("requirements", "torch>=2.1\n").findings[0]
    assert (
        unpinned.held is not None
        and unpinned.held.why == "the fix needs $VERSION, which `torch>=2.1` does not give"
    )
    assert not unpinned.applied


def test_scripts_report_what_pip_and_conda_install() -> None:
    script = (
        "#!/bin/bash\nCUDA_HOME=/usr/local/cuda pip install 'torch==2.1.0' -r reqs.txt flash-attn\n"
        "python3 -m pip install --index-url=https://download.pytorch.org/whl/cu121 torchvision\n"
        "conda install -c nvidia cuda-toolkit\n"
    )
    result = migrate("shell", script)
    assert found(result) == [
        (2, 1, "NPU753", "CUDA_HOME"),
        (2, 40, "NPU761", "torch==2.1.0"),
        (2, 66, "NPU767", "flash-attn"),
        (3, 36, "NPU763", "https://download.pytorch.org/whl/cu121"),
        (4, 18, "NPU766", "nvidia"),
        (4, 25, "NPU764", "cuda-toolkit"),
    ]
    assert (
        result.findings[1].held is not None and "add to this command by hand" in result.findings[1].held.why
    )


def test_dependency_files_without_findings_stay_byte_identical(tmp_path: Path) -> None:
    files = {
        "requirements.txt": "numpy==1.26.4  # pinned\r\n--index-url https://pypi.org/simple\r\n",
        "pyproject.toml": '[project]\nname = "x"\ndependencies = ["torch_npu==2.1.0", "torch==2.1.0"]\n',
        "setup.cfg": "[options]\ninstall_requires =\n    numpy\n",
        "environment.yml": "dependencies:\n  - python=3.11\n",
        "setup.py": 'from setuptools import setup\nsetup(name="x", install_requires=["numpy"])\n',
    }
    for name, text in files.items():
        (tmp_path / name).write_bytes(text.encode())
    result = run_cli("apply", ".", "--unsafe", "--no-change-list", cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    assert {name: (tmp_path / name).read_bytes().decode() for name in files} == files


def test_text_files_in_a_requirements_folder_are_requirements(tmp_path: Path) -> None:
    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements" / "quant.txt").write_text("bitsandbytes>=0.39\n")
    (tmp_path / "notes.txt").write_text("bitsandbytes>=0.39\n")
    report = json.loads(run_cli("scan", ".", "--format", "json", cwd=tmp_path).stdout)
    assert [(f["file"], f["code"]) for f in report["findings"]] == [("requirements/quant.txt", "NPU767")]


def test_a_requirements_file_that_is_not_utf8_is_named_and_left_alone(tmp_path: Path) -> None:
    latin1 = "# d\xe9pendances\ntorch==2.1.0\n".encode("latin-1")
    (tmp_path / "requirements.txt").write_bytes(latin1)
    result = run_cli("apply", ".", "--no-change-list", cwd=tmp_path)
    assert result.returncode == 1 and "requirements.txt: line 1: cannot decode as utf-8" in result.stdout
    assert (tmp_path / "requirements.txt").read_bytes() == latin1
