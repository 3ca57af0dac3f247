"""`npu-migrate verify` end to end on small real models: correct migrations pass, wrong ones
fail and name the module (or the training step) where they go wrong, and broken entries or
sides give clear errors."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixture_cases import FIXTURES, run_cli

pytest.importorskip("torch")

CASES = FIXTURES / "verify"


def verify(tmp_path: Path, *args: str | Path) -> tuple[int, dict, str]:
    report = tmp_path / "report.json"
    result = run_cli("verify", *args, "--entry", "entry.py:build", "--json", report, cwd=tmp_path)
    data = json.loads(report.read_text()) if report.exists() else {}
    return result.returncode, data, result.stdout + result.stderr


def msprobe_first_divergence(dump: Path, out: Path) -> str | None:
    """The module msprobe's own `compare` blames on verify's dumps: the first op (in the order
    calls finish, children first) whose Result is not pass. Fuzzy matching (-fm) pairs a module
    whose class the migration changed (LayerNorm -> RMSNorm)."""
    command = [Path(sys.executable).with_name("msprobe"), "compare", "-tp", dump / "migrated" / "step0"]
    command += ["-gp", dump / "original" / "step0", "-o", out, "-fm"]
    subprocess.run(command, capture_output=True, text=True, check=True)
    [table] = out.glob("compare_result_*.csv")
    with table.open(newline="") as rows:
        failing = [row["NPU Name"] for row in csv.DictReader(rows) if row["Result"] != "pass"]
    if not failing:
        return None
    op = failing[0].split(".input.")[0].split(".output.")[0].split(".parameters.")[0]
    return ".".join(op.split(".")[1:-3])  # Module.<name>.<Class>.forward.<index>


def pair(model: str, migrated: str) -> list[str | Path]:
    return ["--original", CASES / model / "original", "--migrated", CASES / model / migrated]


@pytest.mark.parametrize("model", ["gpt", "cnn", "llama", "meta_llama"])
def test_a_correct_migration_passes(model: str, tmp_path: Path) -> None:
    code, data, output = verify(tmp_path, *pair(model, "migrated"))
    assert code == 0, output
    assert data["passed"] and data["first_divergence"] is None
    assert data["migrated"]["emulated"] is True and "NPU emulation" in output
    assert len(data["rows"]) > 5 and all(r["passed"] for r in data["rows"])
    assert all(r["cosine"] > 0.9999 for r in data["rows"])
    table = [line for line in output.splitlines() if line.startswith("│")]  # piped: not folded
    assert table and all(line.split("│")[1].strip() for line in table), output
    assert f"PASS: the forward's {len(data['rows'])} compared tensors agree" in output  # outputs once


@pytest.mark.parametrize(
    ("model", "wrong", "module"),
    [
        ("gpt", "migrated_wrong_scale", "blocks.0.attn"),
        ("llama", "migrated_inverted_mask", "layers.0.self_attn"),
    ],
)
def test_a_wrong_migration_fails_at_the_right_module(
    model: str, wrong: str, module: str, tmp_path: Path
) -> None:
    code, data, output = verify(tmp_path, *pair(model, wrong), "--dump", tmp_path / "dump")
    assert code == 1
    assert data["first_divergence"] == module
    assert msprobe_first_divergence(tmp_path / "dump", tmp_path / "msprobe") == module
    assert f"module outputs diverge first at {module}" in output
    earlier = [r for r in data["rows"] if r["module"] != module][: data["rows"].index(
        next(r for r in data["rows"] if r["module"] == module)
    )]  # fmt: skip
    assert earlier and all(r["passed"] for r in earlier), "modules before the bug agree"


def test_training_mode_catches_a_wrong_optimizer_setting(tmp_path: Path) -> None:
    code, data, output = verify(tmp_path, *pair("gpt", "migrated_wrong_lr"), "--steps", "3")
    assert code == 1
    assert all(r["passed"] for r in data["rows"]), "the forward pass is the same"
    first = data["steps"][0]  # the loss and gradients of step 1 agree; the parameters it leaves do not
    assert not first["failed_grads"] and first["failed_state"][0].startswith("parameter ")
    assert "training diverges at step 1, first at parameter " in output
    same = verify(tmp_path, *pair("gpt", "migrated"), "--steps", "3")
    assert same[0] == 0 and all(s["passed"] for s in same[1]["steps"])
    assert same[1]["memory"]["optimizer_original"] > 0
    # the key bias's gradient is rounding noise that AdamW turns into full steps: not compared
    assert any("gradients within rounding of zero" in w for w in same[1]["warnings"])


AUTOCAST = {  # the GPT's forward under bfloat16 autocast, its parameters float32
    "model.py": [
        (
            "    def forward(self, idx):\n",
            "    def forward(self, idx):\n"
            "        with torch.autocast(idx.device.type, dtype=torch.bfloat16):\n"
            "            return self.forward_bf16(idx)\n\n"
            "    def forward_bf16(self, idx):\n",
        )
    ]
}


def test_mixed_precision_training_is_held_to_the_precision_it_computes_in(tmp_path: Path) -> None:
    """Under bfloat16 autocast the float32 gradients come out of bfloat16 matmuls; held to
    float32's tolerance, a correct migration (SDPA to npu_fusion_attention) 'diverged at step 1'.
    A learning rate 1.5 times the original's (a linear warmup one step ahead) moves a norm's
    float32 weight of 1.0 by 5e-4, within bfloat16's tolerance of it, but changes its step by
    half (the biases, near zero, fail as parameters too)."""
    original = edited(tmp_path, CASES / "gpt" / "original", "original", AUTOCAST)
    migrated = edited(tmp_path, CASES / "gpt" / "migrated", "migrated", AUTOCAST)
    code, data, output = verify(tmp_path, "--original", original, "--migrated", migrated, "--steps", "2")
    assert code == 0, output
    assert any(row["dtype"] == "bfloat16" for row in data["rows"])
    assert all(step["passed"] and not step["failed_grads"] for step in data["steps"])
    assert data["loss_rtol"] == pytest.approx(1e-4 * (2**-6 / 1e-4) ** 0.5), "the loss too, averaged"
    ahead = {"entry.py": [("model.parameters(), lr=1e-3,", "model.parameters(), lr=1.5e-3,")]}
    ahead = edited(tmp_path, migrated, "warmup-ahead", ahead)
    code, data, output = verify(tmp_path, "--original", original, "--migrated", ahead, "--steps", "2")
    assert code == 1, output
    step, weight = data["steps"][0], "parameter blocks.0.ln_1.weight"
    assert not step["failed_grads"] and weight not in step["failed_state"], "a norm's weight of 1 agrees"
    assert weight in step["failed_updates"], "its step does not"


def test_verify_can_migrate_a_copy_itself(tmp_path: Path) -> None:
    code, data, output = verify(tmp_path, CASES / "gpt" / "original", "--unsafe", "--steps", "2")
    assert code == 0, output
    assert data["passed"] and len(data["steps"]) == 2
    # the migrated side counts the fused operators it ran: SDPA swapped in both layers, every
    # forward (a warm-up, five timed, one recorded) and each step's
    calls = data["migrated"]["fused_calls"]
    assert calls == {"npu_fusion_attention": 2 * (7 + 2)}, calls
    assert data["migrated"]["fused_sites"] == {"model.py:CausalSelfAttention.forward": 18}, data["migrated"]
    assert "fused operators the migrated side ran (forwards and steps): npu_fusion_attention x18" in output
    # the swap carries its run-time guard, which let the fused operator run every time
    guarded = data["migrated"]["guarded"]
    assert list(guarded.values()) == [{"fused": 18}], guarded
    assert f"guarded swap at {next(iter(guarded))}: fused 18 of 18" in output
    # the fused attention's emulation works in query blocks and the rule caches its causal mask:
    # the migration costs about what the original does
    assert data["memory"]["peak_ratio"] <= 1.5, data["memory"]


WINDOWS = """
class Model(torch.nn.Module):
    # Swin-style attention over (B, windows, heads, tokens, dim), then one window's heads
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        windows = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        q, k, v = q[:, 0], k[:, 0], v[:, 0]
        heads = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return windows.mean(1) + heads


def build_double():
    torch.manual_seed(0)
    return Model().double(), (torch.randn(2, 3, 2, 5, 8, dtype=torch.float64),)
"""


def test_a_guarded_swap_falls_back_to_the_original_where_the_operator_cannot_run(tmp_path: Path) -> None:
    """`verify --unsafe` migrates a copy and counts what each guard said: the 5-D window
    attention keeps SDPA (npu_fusion_attention takes 4-D BNSD), the 4-D one is fused; in
    float64, which the operator lacks, both keep SDPA and the numbers are the original's."""
    tree = write_tree(tmp_path / "windows", WINDOWS)
    (tree / "entry.py").write_text(
        (tree / "entry.py").read_text().replace("torch.randn(2, 4)", "torch.randn(2, 3, 2, 5, 8)")
    )
    code, data, output = verify(tmp_path, tree, "--unsafe")
    assert code == 0, output
    by_line = {site.rsplit(":", 1)[1]: runs for site, runs in data["migrated"]["guarded"].items()}
    windows, heads = (by_line[line] for line in sorted(by_line, key=int))
    assert windows == {"5-D, not 4-D (B, N, S, D)": 7} and heads == {"fused": 7}, by_line
    assert "fell back 7 (5-D, not 4-D (B, N, S, D))" in output
    report = tmp_path / "double.json"
    double = run_cli(
        "verify", tree, "--unsafe", "--entry", "entry.py:build_double", "--json", report, cwd=tmp_path
    )
    assert double.returncode == 0, double.stdout + double.stderr
    data = json.loads(report.read_text())
    outcomes = [runs for runs in data["migrated"]["guarded"].values()]
    assert {"torch.float64, not float16, bfloat16 or float32": 7} in outcomes, outcomes
    assert not any("fused" in runs for runs in outcomes)
    assert all(row["max_abs"] == 0 for row in data["rows"]), "the original ran: the same numbers"


def test_mismatched_weights_are_reported_plainly(tmp_path: Path) -> None:
    migrated = tmp_path / "renamed"
    shutil.copytree(CASES / "cnn" / "migrated", migrated)
    model = migrated / "model.py"
    text = model.read_text()
    renamed = text.replace("self.head", "self.classifier")
    assert renamed != text, "the CNN fixture names its last layer head"
    model.write_text(renamed)
    code, data, _ = verify(tmp_path, "--original", CASES / "cnn" / "original", "--migrated", migrated)
    assert code == 1
    assert any("missing on the migrated side: head.weight" in p for p in data["problems"])
    assert any("only on the migrated side: classifier.weight" in p for p in data["problems"])


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("raises", 'raise RuntimeError("boom in user code")\nRuntimeError: boom in user code'),
        ("not_a_model", "the entry's model is a int, not a torch.nn.Module"),
        ("no_function", "entry.py has no function build()"),
        ("syntax", "SyntaxError: invalid syntax"),
    ],
)
def test_broken_entries_give_clear_errors(case: str, message: str, tmp_path: Path) -> None:
    tree = CASES / "broken" / case
    code, _, output = verify(tmp_path, "--original", tree, "--migrated", tree)
    assert code == 2
    assert "error: the original side failed:" in output and message in output
    assert "npu_migrate" not in output.split("failed:", 1)[1], "only the user's frames"


def test_usage_errors_are_one_line(tmp_path: Path) -> None:
    missing = run_cli("verify", "--original", "a", "--migrated", "b", "--entry", "e.py:f", cwd=tmp_path)
    assert missing.returncode == 2 and "no such folder: a" in missing.stderr
    no_entry = run_cli("verify", CASES / "cnn" / "original", cwd=tmp_path)
    assert no_entry.returncode == 2 and no_entry.stderr.strip() == "error: --entry FILE:FUNC is required"
    wrong_file = verify(
        tmp_path, "--original", CASES / "cnn" / "original", "--migrated", CASES / "cnn" / "migrated"
    )
    assert wrong_file[0] == 0
    bad = run_cli("verify", *pair("cnn", "migrated"), "--entry", "nope.py:build", cwd=tmp_path)
    assert bad.returncode == 2 and "no entry file nope.py" in bad.stderr
    assert "verify: running" not in bad.stderr, "said before any side starts"
    shape = run_cli("verify", *pair("cnn", "migrated"), "--entry", "entry.py", cwd=tmp_path)
    assert shape.returncode == 2
    assert shape.stderr.strip() == "error: --entry must be FILE:FUNC (e.g. entry.py:build), got 'entry.py'"


def test_a_dump_folder_msprobe_cannot_read_is_refused_up_front(tmp_path: Path) -> None:
    args = ["--entry", "entry.py:build", "--dump", "my dumps"]
    bad = run_cli("verify", *pair("cnn", "migrated"), *args, cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.strip().startswith("error: --dump my dumps: msprobe reads only paths of")
    assert not (tmp_path / "my dumps").exists()


def test_progress_is_a_line_per_phase_when_piped(tmp_path: Path) -> None:
    result = run_cli("verify", *pair("cnn", "migrated"), "--entry", "entry.py:build", cwd=tmp_path)
    assert result.returncode == 0
    phases = [line for line in result.stderr.splitlines() if line.startswith("verify: ")]
    assert phases == [
        "verify: running the original on cpu",
        "verify: running the migrated copy on the NPU emulation",
        "verify: comparing",
    ]


def test_onnx_export_is_checked_run_and_compared(tmp_path: Path) -> None:
    code, data, output = verify(tmp_path, *pair("cnn", "migrated"), "--onnx")
    assert code == 0, output
    assert data["onnx"]["opset"] >= 17
    assert data["onnx"]["operators"]["Conv"] == 2 and "Gemm" in data["onnx"]["operators"]
    [row] = data["onnx_rows"]
    assert row["passed"] and row["cosine"] > 0.9999
    assert "ONNX: opset" in output


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium driven by selenium, the system's browser and driver (.ci/run installs
    them with apt)."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.skip("needs chromium and chromedriver: apt-get install chromium chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(flag)
    session = webdriver.Chrome(service=Service(driver), options=options)
    yield session
    session.quit()


def _page(browser, page: Path) -> dict:
    """What the browser shows of a report: its sections, whether each image decoded, the marked
    row, the tables' first cells, and whether it loads anything from elsewhere."""
    browser.get(page.as_uri())
    return browser.execute_script(
        """
        const text = (el) => el ? el.innerText : null;
        const blamed = document.querySelector('#tensors tr.blamed');
        return {
          verdict: text(document.querySelector('#verdict')),
          sections: [...document.querySelectorAll('section')].map((s) => s.id),
          images: [...document.images].map((i) => i.complete && i.naturalWidth > 100),
          compared: Object.fromEntries([...document.querySelectorAll('#compared tr')].map(
            (r) => [r.cells[0].innerText, r.cells[1].innerText])),
          steps: [...document.querySelectorAll('#training tbody tr')].map((r) => r.innerText),
          changes: [...document.querySelectorAll('#changes tbody tr')].map((r) => r.cells[0].innerText),
          blamed: blamed && [...blamed.cells].map((c) => c.innerText),
          blamedWeight: blamed && getComputedStyle(blamed.cells[0]).fontWeight,
          header: [...document.querySelectorAll('#tensors th')].map((h) => h.innerText),
          evidence: [...document.querySelectorAll('#evidence tbody tr')].map((r) => r.cells[1].innerText),
          external: document.querySelectorAll('script, link, iframe').length,
        };
        """
    )


def test_the_html_report_shows_what_was_compared_in_a_browser(browser, tmp_path: Path) -> None:
    """The report opened in a headless Chromium: the sections a reviewer needs (what ran against
    what, the migration's changes by rule, the per-step table and its difference plot, memory,
    the tensor table with the blamed module marked), every plot decoded, nothing loaded from
    elsewhere."""
    page = tmp_path / "report.html"
    code, data, _ = verify(tmp_path, *pair("gpt", "migrated_wrong_scale"), "--steps", "2", "--html", page)
    assert code == 1
    # every gradient differs after a forward that does; none is where the difference starts
    assert "training diverges at step 1, after the forward's divergence at blocks.0.attn" in data["problems"]
    shown = _page(browser, page)
    assert shown["verdict"].startswith("FAIL: 21 of the forward's 25 compared tensors differ")
    sections = ["problems", "evidence", "compared", "numerics", "training", "memory", "tensors"]
    assert shown["sections"] == sections, "a FAIL's evidence comes first"
    assert shown["evidence"] and set(shown["evidence"]) == {"blocks.0.attn"}, "the blamed module's own code"
    assert shown["images"] == [True, True, True], "the depth, step-difference and memory plots"
    compared = shown["compared"]
    assert (
        compared["original tree"].endswith("gpt/original")
        and compared["migrated ran"] == "on npu (NPU emulation)"
    )
    assert compared["command"].startswith("npu-migrate verify --original")
    assert "torch 2.13.0" in compared["migrated versions"] and "torch_npu" in compared["migrated versions"]
    assert [line.split("\t")[0] for line in shown["steps"]] == ["1", "2"]
    assert shown["blamed"][:2] == ["blocks.0.attn", "blocks.0.attn ◀ first divergence"]
    assert shown["blamed"][-2:][0] == "fail" and int(shown["blamedWeight"]) >= 600
    assert "own code" in shown["header"] and shown["external"] == 0
    code, _, _ = verify(tmp_path, CASES / "gpt" / "original", "--unsafe", "--html", page)
    assert code == 0
    shown = _page(browser, page)
    assert shown["verdict"].startswith("PASS") and "changes" in shown["sections"]
    assert {"NPU901", "NPU910"} <= set(shown["changes"]) and shown["blamed"] is None
    assert "a copy of" in shown["compared"]["migrated tree"]


def test_thresholds_are_configurable(tmp_path: Path) -> None:
    loose = ["--rule", "msprobe", "--cosine-warn", "0", "--cosine-fail", "0", "--abs-fail", "100"]
    code, data, _ = verify(tmp_path, *pair("gpt", "migrated_wrong_scale"), *loose)
    assert code == 0 and data["passed"] and data["rule"].startswith("msprobe")
    code, data, _ = verify(tmp_path, *pair("gpt", "migrated_wrong_scale"), "--within-share", "0")
    shifted = [row for row in data["own_rows"] if row["shift"]]  # no share asked, but a systematic shift
    assert code == 1 and shifted and all(row["module"].endswith(".attn") for row in shifted)
    loose = ["--within-share", "0", "--rtol", "float32=1"]  # the shift is judged against the tolerance
    code, data, _ = verify(tmp_path, *pair("gpt", "migrated_wrong_scale"), *loose)
    assert code == 0 and data["passed"] and data["rule"].startswith("tight (cpu vs cpu)")
    strict = verify(tmp_path, *pair("gpt", "migrated"), "--max-memory-ratio", "0.5")
    assert strict[0] == 1 and any("peak memory ratio" in p for p in strict[1]["problems"])


def write_tree(root: Path, model_code: str) -> Path:
    root.mkdir(parents=True)
    (root / "entry.py").write_text(
        "import torch\n\n"
        f"{model_code}\n\n"
        "def build():\n"
        "    torch.manual_seed(0)\n"
        "    return Model(), (torch.randn(2, 4),)\n"
    )
    return root


def test_non_tensor_outputs_and_a_crashing_side_are_clear(tmp_path: Path) -> None:
    words = write_tree(
        tmp_path / "words",
        "class Model(torch.nn.Module):\n    def forward(self, x):\n        return 'four numbers'\n",
    )
    code, _, output = verify(tmp_path, "--original", words, "--migrated", words)
    assert code == 2 and "the model's output holds no tensor (it returned a str)" in output
    good = write_tree(
        tmp_path / "good",
        "class Model(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.lin = torch.nn.Linear(4, 2)\n\n    def forward(self, x):\n        return self.lin(x)\n",
    )
    crashing = write_tree(
        tmp_path / "crashing",
        "class Model(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.lin = torch.nn.Linear(4, 2)\n\n    def forward(self, x):\n"
        "        return self.lin(x.npu()) @ torch.ones(3, 3, device='npu')\n",
    )
    code, _, output = verify(tmp_path, "--original", good, "--migrated", crashing)
    assert code == 2 and "error: the migrated side failed:" in output
    assert "in forward" in output and "RuntimeError" in output and "npu_migrate" not in output


def test_a_module_extra_state_that_is_no_tensor_is_handed_over_as_it_is(tmp_path: Path) -> None:
    """Megatron's layers keep `_extra_state` in their state dict, None outside FP8: the migrated
    side is given it as it is (the weights' handover crashed on `None.detach()`)."""
    tree = write_tree(
        tmp_path / "extra",
        "class Model(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.lin = torch.nn.Linear(4, 2)\n\n    def get_extra_state(self):\n        return None\n\n"
        "    def set_extra_state(self, state):\n        assert state is None\n\n"
        "    def forward(self, x):\n        return self.lin(x)\n",
    )
    code, data, output = verify(tmp_path, "--original", tree, "--migrated", tree)
    assert code == 0 and data["passed"], output


def test_dtype_tolerances_are_configurable(tmp_path: Path) -> None:
    _, default, _ = verify(tmp_path, *pair("cnn", "migrated"))
    _, loose, _ = verify(tmp_path, *pair("cnn", "migrated"), "--rtol", "float32=0.5")
    assert loose["rows"][0]["within_dtype_tol"] >= default["rows"][0]["within_dtype_tol"]
    assert all(r["within_dtype_tol"] == 1.0 for r in loose["rows"])
    bad = run_cli(
        "verify", *pair("cnn", "migrated"), "--entry", "entry.py:build", "--rtol", "half", cwd=tmp_path
    )
    assert bad.returncode == 2 and "--rtol takes DTYPE=VALUE" in bad.stderr


LOOP_ARGS = ["--entry", "entry.py:build", "--timeout", "30"]  # past torch's import on a loaded machine


def test_a_looping_side_is_stopped_where_it_loops_and_leaves_nothing_behind(tmp_path: Path) -> None:
    tree = tmp_path / "loops"
    tree.mkdir()
    (tree / "entry.py").write_text(
        "import time\n\nimport torch\n\n\ndef spin():\n    while True:\n        time.sleep(0.1)\n\n\n"
        "def build():\n    spin()\n"
    )
    temp = tmp_path / "tmp"
    temp.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "npu_migrate", "verify", "--original", tree, "--migrated", tree, *LOOP_ARGS],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": str(temp)},
        timeout=900,  # a guard against a hang, not a time limit
        check=False,
    )
    assert result.returncode == 2
    assert "the original side failed" in result.stderr and "still running after 30 s" in result.stderr
    assert "entry.py" in result.stderr and "spin" in result.stderr  # where it was
    assert list(temp.iterdir()) == []  # the work folder went with it
    leftover = subprocess.run(["pgrep", "-f", "npu_migrate.verify.side"], capture_output=True, text=True)
    assert str(tree) not in leftover.stdout


def test_a_side_over_its_memory_cap_fails_plainly(tmp_path: Path) -> None:
    tree = tmp_path / "hungry"
    tree.mkdir()
    (tree / "entry.py").write_text(
        "import torch\n\n\ndef build():\n    hog = torch.ones(4 * 2**30 // 4)\n"
        "    return torch.nn.Linear(2, 2), (hog[:2],)\n"
    )
    code, _, output = verify(tmp_path, "--original", tree, "--migrated", tree, "--max-side-memory", "1")
    assert code == 2
    assert "the original side failed" in output
    assert "memory" in output.lower()


Edit = tuple[str, str]


def edited(tmp_path: Path, tree: Path, name: str, edits: dict[str, list[Edit]]) -> Path:
    """A copy of a fixture tree with the same edits a test makes on both sides."""
    copy = Path(shutil.copytree(tree, tmp_path / name))
    for file, changes in edits.items():
        text = (copy / file).read_text()
        for old, new in changes:
            assert old in text, f"{old!r} is not in {file}"
            text = text.replace(old, new)
        (copy / file).write_text(text)
    return copy


def planted(tmp_path: Path, model: str, edits: dict[str, Edit | list[Edit]]) -> Path:
    """The correct migration of a fixture with a bug planted: {file: (old, new) or a list}."""
    lists = {name: changes if isinstance(changes, list) else [changes] for name, changes in edits.items()}
    return edited(tmp_path, CASES / model / "migrated", f"{model}-planted", lists)


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(  # built in Transformer.forward and handed to every block
            ("mask = torch.triu(mask, diagonal=1)", "mask = torch.triu(mask, diagonal=2)"),
            id="mask-off-by-one",
        ),
        pytest.param(  # built in the model's __init__, sliced in its forward, handed to every block
            ("torch.polar(torch.ones_like(freqs), freqs)", "torch.polar(torch.ones_like(freqs), -freqs)"),
            id="rope-table-conjugated",
        ),
        pytest.param(  # the same table's angles rounded through bfloat16 in __init__
            ("freqs = torch.outer(t, freqs)", "freqs = torch.outer(t, freqs).bfloat16().float()"),
            id="rope-table-rounded-through-bf16",
        ),
    ],
)
def test_a_mask_or_complex_table_made_wrong_by_the_model_is_blamed_on_the_model(
    edit: Edit, tmp_path: Path
) -> None:
    """Meta's Llama form: an additive -inf mask and a complex rotary table, both made by the
    top-level model and handed to its blocks. The blocks' inputs differ (the infinities'
    positions; the table's imaginary part), so the blame is the model's own code, not the first
    attention module that computes with them, nor the ModuleList that holds the blocks."""
    tree = planted(tmp_path, "meta_llama", {"model.py": edit})
    code, data, output = verify(tmp_path, "--original", CASES / "meta_llama" / "original", "--migrated", tree)
    assert code == 1, output
    assert data["first_divergence"] == "(model)", output
    assert "in its own code: layers.0 is handed a different input" in output


@pytest.mark.parametrize(
    ("model", "edits", "module", "detail"),
    [
        pytest.param(  # passes msprobe's cosine rule (0.9999+) but not the tight one
            "gpt",
            {
                "model.py": (
                    "return self.proj(self.act(self.fc(x)))",
                    "return self.proj(self.act(self.fc(x)) * 1.02)",
                )
            },
            "blocks.0.mlp",
            "in its own code: blocks.0.mlp.proj is handed a different input",
            id="gelu-output-scaled-1.02",
        ),
        pytest.param(
            "llama",
            {"model.py": ("epsilon=self.eps)", "epsilon=self.eps * 10000)")},
            "layers.0.input_layernorm",
            "",
            id="rms-norm-eps",
        ),
        pytest.param(
            "gpt",
            {"model.py": ("self.ln_1 = nn.LayerNorm(n_embd)", "self.ln_1 = nn.RMSNorm(n_embd)")},
            "blocks.0.ln_1",
            "",
            id="layer-norm-to-rms-norm",
        ),
        pytest.param(
            "llama",
            {
                "model.py": (
                    "npu_rotary_mul(x, cos, sin)",
                    'npu_rotary_mul(x, cos, sin, rotary_mode="interleave")',
                )
            },
            "layers.0.self_attn",
            "",
            id="rope-layout",
        ),
        pytest.param(  # SDPA's polarity (True = attend) handed to the fused op, in the second block only
            "gpt",
            {
                "model.py": [
                    ("self.n_head = n_head", "self.n_head = n_head\n        self.keep_polarity = False"),
                    (
                        "        y = torch_npu.npu_fusion_attention(",
                        "        if self.keep_polarity:\n"
                        "            causal = torch.ones(S, S, dtype=torch.bool, device=q.device)\n"
                        "            atten_mask = ~torch.triu(causal, diagonal=1)\n"
                        "        y = torch_npu.npu_fusion_attention(",
                    ),
                    ("sparse_mode=2", "sparse_mode=0 if self.keep_polarity else 2"),
                    (
                        "for _ in range(n_layer)])",
                        "for _ in range(n_layer)])\n        self.blocks[1].attn.keep_polarity = True",
                    ),
                ]
            },
            "blocks.1.attn",
            "",
            id="mask-polarity-in-one-layer",
        ),
        pytest.param(  # the loaded head weights overwrite the embedding they now share
            "gpt",
            {
                "model.py": (
                    "self.head = nn.Linear(n_embd, vocab_size, bias=False)",
                    "self.head = nn.Linear(n_embd, vocab_size, bias=False)\n"
                    "        self.head.weight = self.tok_emb.weight",
                )
            },
            "tok_emb",
            "",
            id="weights-tied-on-one-side",
        ),
        pytest.param(
            "gpt",
            {
                "model.py": (
                    "        return self.proj(self.act(self.fc(x)))",
                    "        with torch.autocast('npu', dtype=torch.bfloat16):\n"
                    "            return self.proj(self.act(self.fc(x)))",
                )
            },
            "blocks.0.mlp.fc",
            "",
            id="one-sided-autocast",
        ),
    ],
)
def test_planted_bugs_fail_at_the_module_whose_code_made_them(
    model: str, edits: dict, module: str, detail: str, tmp_path: Path
) -> None:
    tree = planted(tmp_path, model, edits)
    dump = tmp_path / "dump"
    original = CASES / model / "original"
    code, data, output = verify(tmp_path, "--original", original, "--migrated", tree, "--dump", dump)
    assert code == 1, output
    assert data["first_divergence"] == module, output
    # msprobe's compare reads the same dumps and agrees, but for weights that differ where an
    # Embedding's integer inputs agree: its verdict weighs outputs against inputs, never parameters
    blind = module == "tok_emb"
    assert msprobe_first_divergence(dump, tmp_path / "msprobe") == (None if blind else module)
    assert f"module outputs diverge first at {module}" + (f" ({detail})" if detail else "") in output
    assert data["rule"].startswith("tight (cpu vs cpu)")


def test_a_bug_in_one_output_of_a_dict_fails_and_constant_outputs_are_flagged(tmp_path: Path) -> None:
    model = (
        "class Model(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.lin = torch.nn.Linear(4, 3)\n        self.head = torch.nn.Linear(3, 2)\n"
        "        torch.nn.init.zeros_(self.head.weight)\n        torch.nn.init.zeros_(self.head.bias)\n\n"
        "    def forward(self, x):\n        y = self.lin(x)\n"
        "        return {'features': y, 'scores': self.head(y), 'scaled': y * SCALE}\n"
    )
    original = write_tree(tmp_path / "original", "SCALE = 1.0\n\n" + model)
    good = write_tree(tmp_path / "good", "SCALE = 1.0\n\n" + model)
    bad = write_tree(tmp_path / "bad", "SCALE = 1.01\n\n" + model)
    code, data, output = verify(tmp_path, "--original", original, "--migrated", good)
    assert code == 0, output
    assert "warning: 3 compared tensor(s) are constant in the original" in " ".join(output.split())
    code, data, output = verify(tmp_path, "--original", original, "--migrated", bad)
    assert code == 1 and data["first_divergence"] == "(model)"
    failed = [r["key"] for r in data["output_rows"] if not r["passed"]]
    assert failed == ["output.scaled"]


@pytest.mark.parametrize(
    ("model", "edits", "first"),
    [
        pytest.param(  # step 1's update is lr * sign(g) whatever the betas: only the state tells
            "gpt", {"entry.py": ("betas=(0.9, 0.999)", "betas=(0.9, 0.95)")}, "optimizer ", id="adamw-betas"
        ),
        pytest.param(
            "cnn",
            {"model.py": ("self.bn1 = nn.BatchNorm2d(8)", "self.bn1 = nn.BatchNorm2d(8, momentum=0.2)")},
            "buffer bn1.running_mean",
            id="batch-norm-momentum",
        ),
    ],
)
def test_training_compares_the_state_a_step_leaves(
    model: str, edits: dict, first: str, tmp_path: Path
) -> None:
    tree = planted(tmp_path, model, edits)
    code, data, output = verify(
        tmp_path, "--original", CASES / model / "original", "--migrated", tree, "--steps", "2"
    )
    assert code == 1, output
    step = data["steps"][0]
    assert not step["passed"] and not step["failed_grads"], "loss and gradients of step 1 agree"
    assert step["failed_state"][0].startswith(first)
    assert f"training diverges at step 1, first at {first}" in output


@pytest.mark.parametrize(
    ("model", "edits", "first"),
    [
        pytest.param(  # nanoGPT's configure_optimizers groups on one side: no decay for 1-D tensors
            "gpt",
            {
                "entry.py": (
                    "        model.parameters(), lr=1e-3,",
                    "        [\n"
                    '            {"params": [p for p in model.parameters() if p.dim() >= 2]},\n'
                    '            {"params": [p for p in model.parameters() if p.dim() < 2],\n'
                    '             "weight_decay": 0.0},\n'
                    "        ],\n"
                    "        lr=1e-3,",
                )
            },
            "parameter blocks.0.ln_1.weight",
            id="adamw-no-decay-for-norms-on-one-side",
        ),
        pytest.param(  # a CIFAR recipe's weight decay on the migrated side only, under SGD
            "cnn",
            {
                "entry.py": (
                    '    return {"model": model, "inputs": (images,), "loss_fn": loss_fn}',
                    "    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, weight_decay=5e-4)\n"
                    '    return {"model": model, "inputs": (images,), "loss_fn": loss_fn,\n'
                    '            "optimizer": optimizer}',
                )
            },
            "parameter bn1.weight",
            id="sgd-weight-decay-on-one-side",
        ),
    ],
)
def test_a_training_bug_the_size_of_an_update_fails_at_its_step(
    model: str, edits: dict, first: str, tmp_path: Path
) -> None:
    """Weight decay moves a norm's weight of 1.0 by lr * wd a step (1e-5 of it under AdamW, 5e-7
    under SGD): every parameter after the step agrees to the parameter's tolerance, but what the
    step changed differs by 1% of an Adam step and 0.4% of the BatchNorm weight's SGD step."""
    tree = planted(tmp_path, model, edits)
    original = CASES / model / "original"
    code, data, output = verify(tmp_path, "--original", original, "--migrated", tree, "--steps", "2")
    assert code == 1, output
    step = data["steps"][0]
    assert not step["failed_grads"] and not step["failed_state"], "gradients and parameters agree"
    assert step["failed_updates"][0] == first
    assert f"training diverges at step 1, first at the step's update to {first}" in output
    assert (
        "FAIL: the forward's" in output
        and "compared tensors agree; training diverges at step 1 of 2" in output
    )


SCALAR_OF_NOISE = {  # nanochat's backout_lambda: added before a LayerNorm, which any shift leaves alone
    "model.py": [
        (
            "        self.ln_f = nn.LayerNorm(n_embd)\n",
            "        self.ln_f = nn.LayerNorm(n_embd)\n"
            "        self.backout_lambda = nn.Parameter(torch.tensor([0.5]))\n",
        ),
        ("return self.head(self.ln_f(x))", "return self.head(self.ln_f(x + self.backout_lambda))"),
    ]
}


@pytest.mark.parametrize(
    ("model", "both", "migrated_only"),
    [
        pytest.param("gpt", SCALAR_OF_NOISE, {}, id="scalar-parameter-whose-gradient-is-noise"),
        pytest.param(  # the SwiGLU's up projection called first: the call order of the children changes
            "llama",
            {},
            {
                "model.py": [
                    (
                        "return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))",
                        "up = self.up_proj(x)\n"
                        "        return self.down_proj(up * self.act_fn(self.gate_proj(x)))",
                    )
                ]
            },
            id="mlp-reordered",
        ),
    ],
)
def test_correct_controls_pass_forward_and_steps(
    model: str, both: dict[str, list[Edit]], migrated_only: dict[str, list[Edit]], tmp_path: Path
) -> None:
    """A one-element parameter whose exact gradient is zero (2e-10 of noise beside gradients of
    1e-2) and a module that calls its children in another order are correct migrations: no
    tensor, step or update fails, and no own-code row."""
    original = edited(tmp_path, CASES / model / "original", "original", both)
    migrated = edited(tmp_path, CASES / model / "migrated", "migrated", {**both, **migrated_only})
    code, data, output = verify(tmp_path, "--original", original, "--migrated", migrated, "--steps", "3")
    assert code == 0, output
    assert all(row["passed"] for row in data["own_rows"]) and len(data["own_rows"]) > len(data["rows"])
    assert all(step["passed"] for step in data["steps"]), output


def nanogpt_init(tmp_path: Path, tree: Path, name: str) -> Path:
    """The GPT fixture with nanoGPT's _init_weights (Linear and Embedding weights of std 0.02)."""
    seed = "    g = torch.Generator().manual_seed(1)\n"
    init = (
        "    for module in model.modules():\n"
        "        if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):\n"
        "            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)\n"
    )
    return edited(tmp_path, tree, name, {"entry.py": [(seed, init + seed)]})


def test_init_scale_activations_are_warned_of_and_realistic_weights_find_a_tanh_gelu(tmp_path: Path) -> None:
    """At nanoGPT's init the MLP's GELU sees |x| < 0.44, where its tanh form agrees with erf:
    the migration that swapped one for the other passes, with a warning that names the module;
    --realistic-weights redraws the weights at unit-variance scale on both sides, and the swap
    fails at the GELU while the correct migration still passes."""
    original = nanogpt_init(tmp_path, CASES / "gpt" / "original", "original")
    tanh = planted(tmp_path, "gpt", {"model.py": ("nn.GELU()", 'nn.GELU(approximate="tanh")')})
    tanh = nanogpt_init(tmp_path, tanh, "tanh")
    code, data, output = verify(tmp_path, "--original", original, "--migrated", tanh)
    assert code == 0, output
    warning = next(w for w in data["warnings"] if "elementwise module(s)" in w)
    assert "such as blocks.0.mlp.act" in warning and "--realistic-weights" in warning
    code, data, output = verify(tmp_path, "--original", original, "--migrated", tanh, "--realistic-weights")
    assert code == 1 and data["first_divergence"] == "blocks.0.mlp.act", output
    assert not any("elementwise module(s)" in w for w in data["warnings"])
    correct = nanogpt_init(tmp_path, CASES / "gpt" / "migrated", "correct")
    code, data, output = verify(
        tmp_path, "--original", original, "--migrated", correct, "--realistic-weights"
    )
    assert code == 0, output


def bfloat16_llama(tmp_path: Path, tree: Path) -> Path:
    """The LLaMA fixture as a bfloat16 model: weights and inputs in bfloat16, the rotary table cast
    to the activations' dtype as Hugging Face's LLaMA casts it."""
    randn = "torch.randn(2, 8, 32, generator=g)"
    edits = {
        "entry.py": [
            ("eps=1e-6).to(device)", "eps=1e-6).to(device, torch.bfloat16)"),
            (f"hidden = {randn}", f"hidden = {randn}.bfloat16()"),
            (f"target = {randn}", f"target = {randn}.bfloat16()"),
        ],
        "model.py": [
            (
                "cos, sin = self.rotary_emb(S, x.device)",
                "cos, sin = (t.to(x.dtype) for t in self.rotary_emb(S, x.device))",
            )
        ],
    }
    return edited(tmp_path, tree, f"bf16-{tree.name}", edits)


def test_a_bfloat16_llama_passes_and_an_eps_bug_in_it_is_blamed_on_its_norm(tmp_path: Path) -> None:
    """End to end, a correct bfloat16 forward drifts past bfloat16's tolerance at mlp.down_proj
    (rounding adds up over the layer); each module's own code, replayed on the original's
    inputs, agrees. An RMSNorm eps 10000 times too large shifts every output of the norm by
    0.5%, each element within bfloat16's tolerance: the shift is systematic, and the norm is
    blamed rather than the module past it where the difference first crosses the tolerance."""
    original = bfloat16_llama(tmp_path, CASES / "llama" / "original")
    migrated = bfloat16_llama(tmp_path, CASES / "llama" / "migrated")
    code, data, output = verify(tmp_path, "--original", original, "--migrated", migrated, "--steps", "2")
    assert code == 0, output
    assert data["drifted"] and all(row["passed"] for row in data["own_rows"])
    assert "rounding in bfloat16 accumulates along the network" in " ".join(output.split())
    assert all(step["passed"] for step in data["steps"])
    wrong = planted(tmp_path, "llama", {"model.py": ("epsilon=self.eps)", "epsilon=self.eps * 10000)")})
    wrong = bfloat16_llama(tmp_path, wrong)
    code, data, output = verify(tmp_path, "--original", original, "--migrated", wrong)
    assert code == 1, output
    assert data["first_divergence"] == "layers.0.input_layernorm", output
    blamed = next(row for row in data["own_rows"] if not row["passed"])
    assert blamed["module"] == "layers.0.input_layernorm" and blamed["within_dtype_tol"] == 1.0
    assert blamed["shift"] < 0 and "on average: systematic, not rounding" in blamed["note"]


def test_dropout_is_off_when_training_is_compared_but_dropout_at_inference_fails(tmp_path: Path) -> None:
    """Module, functional and attention dropout draw different masks on the two sides (SDPA's
    dropout_p against npu_fusion_attention's keep_prob); a correct migration of code that uses
    them must not 'diverge at step 1'. A migration that keeps attention dropout on at inference
    (keep_prob without `if self.training`) fails."""
    model = (
        "import torch.nn.functional as F\n\n"
        "class Model(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.lin = torch.nn.Linear(4, 8)\n        self.drop = torch.nn.Dropout(0.3)\n\n"
        "    def forward(self, x):\n"
        "        h = F.dropout(self.drop(self.lin(x)), p=0.5, training=self.training)\n"
        "        q = h.view(2, 2, 1, 4)\n"
        "        return ATTENTION\n"
    )
    sdpa = "F.scaled_dot_product_attention(q, q, q, dropout_p=0.2 if self.training else 0.0)"
    fused = (
        'torch_npu.npu_fusion_attention(q, q, q, 2, "BNSD", scale=0.5, '
        "keep_prob=0.8 if self.training else 1.0)[0]"
    )
    always = fused.replace(" if self.training else 1.0", "")  # the bug: attention dropout at inference too
    uncomplemented = fused.replace("keep_prob=0.8", "keep_prob=0.2")  # the bug: p passed as keep_prob
    trees = []
    for name, header, attention in (
        ("original", "", sdpa),
        ("migrated", "import torch_npu\n", fused),
        ("planted", "import torch_npu\n", always),
        ("uncomplemented", "import torch_npu\n", uncomplemented),
    ):
        tree = write_tree(tmp_path / name, header + model.replace("ATTENTION", attention))
        entry = tree / "entry.py"
        entry.write_text(entry.read_text().replace(
            "return Model(), (torch.randn(2, 4),)",
            "return Model(), (torch.randn(2, 4),), lambda out: out.pow(2).mean()",
        ))  # fmt: skip
        trees.append(tree)
    code, data, output = verify(tmp_path, "--original", trees[0], "--migrated", trees[1], "--steps", "2")
    assert code == 0, output
    assert all(step["passed"] for step in data["steps"])
    assert "dropout is off on both sides" in " ".join(output.split())
    assert not any("random numbers" in w for w in data["warnings"]), "dropout off: nothing drawn"
    code, data, output = verify(tmp_path, "--original", trees[0], "--migrated", trees[2])
    assert code == 1 and data["first_divergence"] == "(model)", output
    assert any("random numbers" in w for w in data["warnings"])
    # dropout off in steps hides a probability ported without its complement: what was asked tells
    code, data, output = verify(tmp_path, "--original", trees[0], "--migrated", trees[3], "--steps", "2")
    assert code == 1 and all(step["passed"] for step in data["steps"]), output
    assert data["original"]["dropout"] == {"entry.py:Model.forward": [0.2, 0.3, 0.5]}
    assert (
        "dropout asked for differs at entry.py:Model.forward: the original p=0.2, 0.3, 0.5, the migrated "
        "p=0.3, 0.5, 0.8" in " ".join(output.split())
    )


def test_a_diverging_migration_names_the_rule_and_the_change_that_breaks_it(tmp_path: Path) -> None:
    """Beyond msprobe: verify TREE migrates its copy again without one rule at a time, and then
    without that rule in one file at a time, until the divergence goes."""
    import yaml

    wrong = {
        "category": "house",
        "codes": "HOU9xx",
        "description": "a rule with a bug",
        "rules": [
            {
                "code": "HOU950",
                "name": "scaled-mlp",
                "summary": "s",
                "why": "w",
                "message": "`{match}` runs faster scaled",
                "applicability": "unsafe",
                "severity": "info",
                "match": {"pattern": "$M.proj($M.act($M.fc($X)))"},
                "fix": {"template": "$M.proj($M.act($M.fc($X)) * 1.02)", "add_import": []},
                "examples": [
                    {
                        "before": "y = self.proj(self.act(self.fc(x)))\n",
                        "after": "y = self.proj(self.act(self.fc(x)) * 1.02)\n",
                    }
                ],
            }
        ],
    }
    (tmp_path / "house.yaml").write_text(yaml.safe_dump(wrong))
    args = (CASES / "gpt" / "original", "--unsafe", "--rules", tmp_path / "house.yaml")
    code, data, output = verify(tmp_path, *args)
    assert code == 1, output
    assert data["culprit"].startswith("the divergence comes from HOU950 in ")
    assert data["culprit"].split(" in ", 1)[1].startswith(str(CASES / "gpt" / "original" / "model.py"))
    assert "self.proj(self.act(self.fc(x)) * 1.02)" in data["culprit"]
    assert "the divergence comes from HOU950" in output
    assert re.search(r"verify: bisecting: the copy without HOU950's changes \(\d of \d rules\)", output)
    assert "verify: bisecting: HOU950's changes undone in " in output
    assert output.count("running the original") == 1, "the copies are compared with one run of the original"
    code, data, _ = verify(tmp_path, *args, "--no-bisect")
    assert code == 1 and data["culprit"] is None


def test_weights_of_fused_modules_are_paired_by_shape(tmp_path: Path) -> None:
    """A migration that fuses q, k and v into one Linear gets the original's three weights,
    concatenated, instead of random ones that make a correct migration fail."""
    split = (
        "class Model(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.attn = torch.nn.ModuleDict({n: torch.nn.Linear(4, 2) for n in ('q', 'k', 'v')})\n\n"
        "    def forward(self, x):\n"
        "        return self.attn['q'](x) * self.attn['k'](x) + self.attn['v'](x)\n"
    )
    fused = (
        "class Model(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.attn = torch.nn.ModuleDict({'qkv': torch.nn.Linear(4, 6)})\n\n"
        "    def forward(self, x):\n        q, k, v = self.attn['qkv'](x).split(2, dim=-1)\n"
        "        return q * k + v\n"
    )
    original, migrated = write_tree(tmp_path / "split", split), write_tree(tmp_path / "fused", fused)
    code, data, output = verify(tmp_path, "--original", original, "--migrated", migrated)
    assert code == 0, output
    assert data["output_rows"][0]["passed"]
    assert any("attn.qkv.weight = concatenation of attn.q.weight, attn.k.weight, attn.v.weight" in w
               for w in data["warnings"])  # fmt: skip


def test_a_weights_map_pairs_what_the_migration_renamed_or_reshaped(tmp_path: Path) -> None:
    original = write_tree(
        tmp_path / "original",
        "class Model(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.lin = torch.nn.Linear(4, 3)\n\n    def forward(self, x):\n        return self.lin(x)\n",
    )
    migrated = write_tree(
        tmp_path / "migrated",
        "class Model(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.w = torch.nn.Parameter(torch.zeros(4, 3))\n"
        "        self.b = torch.nn.Parameter(torch.zeros(3))\n\n"
        "    def forward(self, x):\n        return x @ self.w + self.b\n",
    )
    mapping = tmp_path / "map.yaml"
    mapping.write_text("w: {from: lin.weight, transpose: true}\nb: lin.bias\n")
    code, data, output = verify(tmp_path, "--original", original, "--migrated", migrated)
    assert code == 1 and any("only on the migrated side: w" in p for p in data["problems"])
    code, data, output = verify(
        tmp_path, "--original", original, "--migrated", migrated, "--weights-map", mapping
    )
    assert code == 0, output
    mapping.write_text("w: {from: lin.weight, flip: true}\n")
    bad = run_cli("verify", "--original", original, "--migrated", migrated, "--entry", "entry.py:build",
                  "--weights-map", mapping, cwd=tmp_path)  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.strip().endswith("w: unknown key 'flip'")


def test_a_modulation_swap_at_a_dits_zero_init_fails_at_the_first_step_it_can_show(tmp_path: Path) -> None:
    """adaLN-Zero (fixtures/verify/adaln_dit, bf16 autocast): with the modulation at zero, shift and
    scale swapped change nothing in the forward nor in the first step's gradients (the gates are
    zero); from step 2 their gradients differ, small beside the model's, and must not pass as
    rounding noise. The correct copy passes all three steps."""
    code, data, output = verify(tmp_path, *pair("adaln_dit", "migrated"), "--steps", "3")
    assert code == 0 and all(step["passed"] for step in data["steps"]), output
    code, data, output = verify(tmp_path, *pair("adaln_dit", "migrated_swapped_modulation"), "--steps", "3")
    assert code == 1, output
    assert all(row["passed"] for row in data["rows"]), "the forward agrees at the zero init"
    assert [step["passed"] for step in data["steps"]] == [True, False, False]
    assert any("adaLN_modulation.1" in name for name in data["steps"][1]["failed_grads"])
