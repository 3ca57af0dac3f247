"""Jupyter notebooks through the command line: code cells scanned and rewritten as one module,
findings located by cell and line, magics kept and their shell (`!` lines, `%%bash` cells)
read by the shell rules, the JSON layout,
metadata and outputs preserved, and nothing written where the layout cannot be reproduced."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.fixture_cases import FIXTURES, run_cli

NOTEBOOKS = FIXTURES / "notebooks" / "src"


def test_findings_are_located_by_cell_and_line(tmp_path: Path) -> None:
    result = run_cli("scan", NOTEBOOKS / "train.ipynb", "--format", "json", cwd=tmp_path)
    found = [(f["cell"], f["line"], f["column"], f["code"]) for f in json.loads(result.stdout)["findings"]]
    assert found == [
        (3, 1, 2, "NPU830"),  # !nvidia-smi: the shell's, as in a launch script
        (3, 3, 23, "NPU105"),
        (3, 4, 5, "NPU103"),
        (4, 1, 7, "NPU101"),  # torch imported in cell 2, used here
        (5, 2, 1, "NPU830"),  # nvidia-smi in a %%bash cell
    ]
    text = run_cli("scan", NOTEBOOKS / "train.ipynb", cwd=tmp_path).stdout
    assert "train.ipynb:cell 3:1:2: NPU830 [safe] `nvidia-smi` is NVIDIA's tool" in text


def test_apply_rewrites_code_cells_and_keeps_everything_else(tmp_path: Path) -> None:
    notebook = tmp_path / "train.ipynb"
    shutil.copy(NOTEBOOKS / "train.ipynb", notebook)
    result = run_cli("apply", notebook, "--no-change-list", cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    before = json.loads((NOTEBOOKS / "train.ipynb").read_text())
    after = json.loads(notebook.read_text())
    sources = [c["source"] for c in after["cells"]]
    assert sources[1] == ["import torch\n", "import torch.nn as nn\n", "import torch_npu"]
    assert sources[2] == [
        "!npu-smi info\n",
        "%matplotlib inline\n",
        'device = torch.device("npu")\n',
        "x = torch.randn(4).npu()",
    ]
    assert sources[3] == "print(torch.npu.is_available())", "a string source stays a string"
    assert sources[4] == ["%%bash\n", "npu-smi info\n"] and sources[0] == before["cells"][0]["source"]
    for old, new in zip(before["cells"], after["cells"], strict=True):
        old.pop("source"), new.pop("source")
        assert old == new, "outputs, metadata and counts as they were"
    assert before["metadata"] == after["metadata"]
    written = json.loads(notebook.read_text())
    assert notebook.read_text() == json.dumps(written, indent=1, ensure_ascii=False) + "\n", "layout kept"


def test_untouched_and_unreproducible_notebooks_stay_byte_identical(tmp_path: Path) -> None:
    for name in ("plain.ipynb", "hand_edited.ipynb"):
        shutil.copy(NOTEBOOKS / name, tmp_path / name)
    result = run_cli("apply", ".", "--no-change-list", cwd=tmp_path)
    assert "cannot be written back byte for byte; re-save it in Jupyter" in result.stdout
    for name in ("plain.ipynb", "hand_edited.ipynb"):
        assert (tmp_path / name).read_bytes() == (NOTEBOOKS / name).read_bytes()


def test_a_cell_that_does_not_parse_is_named(tmp_path: Path) -> None:
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None}
    cells = [{**cell, "source": "import torch\n"}, {**cell, "source": "x = torch.cuda(\n"}]
    (tmp_path / "bad.ipynb").write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4}, indent=1))
    result = run_cli("scan", "bad.ipynb", cwd=tmp_path)
    assert result.returncode == 1 and "cell 2 line" in result.stdout


def test_ci_formats_say_the_cell(tmp_path: Path) -> None:
    """SARIF and GitHub have no cells: the notebook is the location, the cell in the text."""
    shutil.copy(NOTEBOOKS / "train.ipynb", tmp_path / "train.ipynb")  # named from here: no repository
    github = run_cli("scan", "train.ipynb", "--format", "github", cwd=tmp_path).stdout.splitlines()
    assert github[0].startswith("::warning file=train.ipynb,title=NPU830 [safe] cell 3 line 1::")
    sarif = json.loads(run_cli("scan", "train.ipynb", "--format", "sarif", cwd=tmp_path).stdout)
    first = sarif["runs"][0]["results"][0]
    assert first["properties"]["cell"] == 3 and "region" not in first["locations"][0]["physicalLocation"]
    rows = run_cli("scan", "train.ipynb", "--format", "csv", cwd=NOTEBOOKS).stdout
    assert "cell 3: `nvidia-smi` is NVIDIA's tool" in rows


def test_the_summary_groups_findings_by_kind_of_file(tmp_path: Path) -> None:
    shutil.copy(NOTEBOOKS / "train.ipynb", tmp_path / "train.ipynb")
    (tmp_path / "train.py").write_text("import torch\n\ntorch.cuda.synchronize()\n")
    result = run_cli("scan", ".", "--format", "json", cwd=tmp_path)
    assert json.loads(result.stdout)["summary"]["by_file_kind"] == {"notebook": 5, "python": 1}
    text = run_cli("scan", ".", cwd=tmp_path).stdout
    assert "By kind of file: 5 in notebook files, 1 in python files." in text


def test_a_shell_line_first_in_the_first_code_cell_is_located_there(tmp_path: Path) -> None:
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": ["# notes"]},
        {
            "cell_type": "code",
            "metadata": {},
            "outputs": [],
            "execution_count": None,
            "source": ["!nvidia-smi -L"],
        },
        {
            "cell_type": "code",
            "metadata": {},
            "outputs": [],
            "execution_count": None,
            "source": ["x = t.cuda()"],
        },
    ]
    notebook = tmp_path / "first.ipynb"
    notebook.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    report = json.loads(run_cli("scan", notebook.name, "--format", "json", cwd=tmp_path).stdout)
    assert [(f["cell"], f["line"], f["column"]) for f in report["findings"]] == [(2, 1, 2), (3, 1, 5)]


def test_a_shell_line_continued_with_a_backslash_is_one_command(tmp_path: Path) -> None:
    """diffusers' SD3 LoRA notebook: `!pip install -q -U \\` then indented package lines, which
    IPython runs as one command (read as Python, they were an unexpected indent)."""
    source = (
        "!pip install -q -U \\\n    transformers \\\n    accelerate\nimport torch\nx = torch.ones(2).cuda()\n"
    )
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": source}
    notebook = tmp_path / "colab.ipynb"
    notebook.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    scanned = run_cli("scan", notebook.name, "--format", "json", cwd=tmp_path)
    assert scanned.returncode == 1, scanned.stderr  # findings, no error
    report = json.loads(scanned.stdout)
    assert report["summary"]["errors"] == []
    assert [(f["cell"], f["line"]) for f in report["findings"]] == [(1, 5)]
    applied = run_cli("apply", notebook.name, cwd=tmp_path)
    assert applied.returncode in (0, 1), applied.stderr
    written = json.loads(notebook.read_text())["cells"][0]["source"]
    assert written.startswith("!pip install -q -U \\\n    transformers \\\n    accelerate\n")
    assert "x = torch.ones(2).npu()" in written


def test_the_shell_a_notebook_runs_meets_the_shell_rules(tmp_path: Path) -> None:
    """`%env`, `!` lines (IPython's `{expression}` a word to bash) and `%%bash` cells are read as
    a launch script is: variables renamed, nvcc reported; the magics' own spelling kept."""
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None}
    cells = [
        {
            **cell,
            "source": [
                "%env CUDA_VISIBLE_DEVICES=0\n",
                "!CUDA_VISIBLE_DEVICES=0 {sys.executable} train.py\n",
                "!nvcc --version",
            ],
        },
        {**cell, "source": ["%%bash\n", "echo $CUDA_VISIBLE_DEVICES\n"]},
    ]
    notebook = tmp_path / "shell.ipynb"
    notebook.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4}, indent=1) + "\n")
    report = json.loads(run_cli("scan", notebook.name, "--format", "json", cwd=tmp_path).stdout)
    found = [(f["cell"], f["line"], f["column"], f["code"], f["label"]) for f in report["findings"]]
    assert found == [
        (1, 1, 6, "NPU751", "safe"),
        (1, 2, 2, "NPU751", "safe"),
        (1, 3, 2, "NPU833", "manual"),
        (2, 2, 7, "NPU751", "safe"),
    ]
    run_cli("apply", notebook.name, "--no-change-list", cwd=tmp_path)
    sources = [c["source"] for c in json.loads(notebook.read_text())["cells"]]
    assert sources == [
        [
            "%env ASCEND_RT_VISIBLE_DEVICES=0\n",
            "!ASCEND_RT_VISIBLE_DEVICES=0 {sys.executable} train.py\n",
            "!nvcc --version",
        ],
        ["%%bash\n", "echo $ASCEND_RT_VISIBLE_DEVICES\n"],
    ]


def _notebook_in(language: str, kernel: str, code: str) -> str:
    cell = {"cell_type": "code", "metadata": {}, "source": code.splitlines(True), "outputs": []}
    metadata = {
        "kernelspec": {"name": kernel, "display_name": language, "language": language},
        "language_info": {"name": language},
    }
    return json.dumps({"cells": [cell], "metadata": metadata, "nbformat": 4, "nbformat_minor": 5})


def test_a_notebook_in_r_or_julia_is_skipped_as_such_not_read_as_python(tmp_path: Path) -> None:
    """An R notebook's `x <- cuda_device` read as Python (`x < -cuda_device`) and was rewritten;
    a Julia notebook's did not parse and the run ended "not read", exit 1. Neither holds Python."""
    (tmp_path / "r.ipynb").write_text(_notebook_in("R", "ir", "x <- torch$cuda$is_available()\n"))
    julia = _notebook_in("julia", "julia-1.10", "using CUDA\nx = cu(rand(3))\nfunction f(x) x end\n")
    (tmp_path / "jl.ipynb").write_text(julia)
    (tmp_path / "py.ipynb").write_text(_notebook_in("python", "python3", "import torch\nx.cuda()\n"))
    before = {p.name: p.read_bytes() for p in tmp_path.glob("*.ipynb")}
    result = run_cli("apply", tmp_path, "--no-change-list", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "jl.ipynb: a notebook in julia, not Python" in result.stdout + result.stderr
    assert "r.ipynb: a notebook in R, not Python" in result.stdout + result.stderr
    after = {p.name: p.read_bytes() for p in tmp_path.glob("*.ipynb")}
    assert after["r.ipynb"] == before["r.ipynb"] and after["jl.ipynb"] == before["jl.ipynb"]
    assert b"x.npu()" in after["py.ipynb"]
    for _ in ("cold", "warm"):  # the second scan reads the handler's decision from the result cache
        scanned = run_cli("scan", tmp_path, cwd=tmp_path)
        assert "r.ipynb: a notebook in R, not Python" in scanned.stdout + scanned.stderr
        assert "jl.ipynb: a notebook in julia, not Python" in scanned.stdout + scanned.stderr
