"""The forecast end to end through the CLI: each fixture (a real project's form) run on the
emulation with `run --emulate --forecast-json`, once with its problem and once as its own
control; the forecast names the problem at the user's line, and nothing in the control."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixture_cases import FIXTURES, run_cli

FORECAST = FIXTURES / "forecast"


def forecast(tmp_path: Path, *script: str, version: str = "2.13.0") -> dict:
    out = tmp_path / "forecast.json"
    ran = run_cli(
        "run", "--emulate", "--forecast-json", str(out), "--torch-npu", version, *script, cwd=FORECAST
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "NPU forecast for torch_npu" in ran.stderr
    return json.loads(out.read_text())


def kinds(result: dict) -> list[str]:
    return [f["kind"] for f in result["findings"]]


def found(result: dict, kind: str) -> list[dict]:
    return [f for f in result["findings"] if f["kind"] == kind]


CASES = [  # script and arguments, the finding expected (kind, words of its title, a site), its control
    (
        ["nanogpt_train.py", "--log-interval", "1"],
        [("shapes", "input shapes change after the first step", "nanogpt_train.py:44"),
         ("sync", ".item()", "nanogpt_train.py:91")],
        ["nanogpt_train.py", "--drop-last", "--log-interval", "0"],
    ),
    (
        ["leaky_prefetcher.py"],
        [("memory", "NPU memory grows", "leaky_prefetcher.py:26")],
        ["leaky_prefetcher.py", "--no-leak"],
    ),
    (
        ["physics_loss.py"],
        [("dtype", "float64 on the NPU", "physics_loss.py:26"),
         ("shapes", "data-dependent operator (index)", "physics_loss.py:31")],
        ["physics_loss.py", "--float32", "--where"],
    ),
    (
        ["metric_all_reduce.py"],
        [("collective", "HCCL refuses allreduce on float64", "metric_all_reduce.py:25")],
        ["metric_all_reduce.py", "--float32"],
    ),
    (
        ["torchrun", "--nproc_per_node", "2", "ddp_device.py"],
        [("collective", "ranks run on another rank's NPU (local rank 1 on npu:0)", "ddp_device.py:24")],
        ["torchrun", "--nproc_per_node", "2", "ddp_device.py", "--set-device"],
    ),
    (
        ["detection_postprocess.py"],
        [("fallback", "detlib::nms has no NPU kernel", "detection_postprocess.py:52")],
        ["detection_postprocess.py", "--batched-topk"],
    ),
    (
        ["encoder_inference.py"],
        [("fallback", "aten::_transformer_encoder_layer_fwd has no NPU kernel", "encoder_inference.py:24")],
        ["encoder_inference.py", "--train"],
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("script", "expected", "control"), CASES, ids=[next(a for a in c[0] if a.endswith(".py")) for c in CASES]
)
def test_the_problem_is_named_and_its_control_is_clean(tmp_path, script, expected, control):
    result = forecast(tmp_path, *script)
    for kind, words, site in expected:
        matching = [f for f in found(result, kind) if words in f["title"]]
        assert matching, (kind, words, [f["title"] for f in result["findings"]])
        assert site in matching[0]["sites"], matching[0]
    clean = forecast(tmp_path, *control)
    assert clean["findings"] == [], [f["title"] for f in clean["findings"]]
    assert clean["npu_calls"] > 0


def test_the_operator_table_follows_the_torch_npu_version(tmp_path):
    """Three operators whose NPU kernels came in different torch_npu releases, as the fixture
    calls them: `isin.Tensor_Tensor` (from 2.5.1), `_native_multi_head_attention` (nn.MultiheadAttention's
    fast path, from 2.13.0), and `_transformer_encoder_layer_fwd` (none of them)."""
    gaps = {}
    for version in ("2.1.0.post3", "2.5.1", "2.13.0"):
        result = forecast(tmp_path, "encoder_inference.py", version=version)
        gaps[version] = {f["title"].split()[0] for f in found(result, "fallback")}
    assert gaps == {
        "2.1.0.post3": {"aten::isin.Tensor_Tensor", "aten::_native_multi_head_attention",
                        "aten::_transformer_encoder_layer_fwd"},
        "2.5.1": {"aten::_native_multi_head_attention", "aten::_transformer_encoder_layer_fwd"},
        "2.13.0": {"aten::_transformer_encoder_layer_fwd"},
    }  # fmt: skip


def test_steps_memory_and_hot_modules_are_reported(tmp_path):
    result = forecast(tmp_path, "nanogpt_train.py", "--drop-last", "--log-interval", "0")
    assert result["step_kind"] == "optimizer" and result["steps"] == 4
    assert len(result["memory"]) == 4 and all(m["peak_mib"] > 0 for m in result["memory"])
    blocks = {m["module"] for m in result["hot_modules"]}
    assert {"GPT.h.0", "GPT.h.1"} <= blocks
    assert result["total_flops"] > 0


def test_html_report_plots_memory_and_shapes(tmp_path):
    page = tmp_path / "forecast.html"
    ran = run_cli("run", "--emulate", "--forecast-html", str(page), "leaky_prefetcher.py", cwd=FORECAST)
    assert ran.returncode == 0, ran.stderr
    text = page.read_text()
    assert "NPU memory grows" in text and "leaky_prefetcher.py:26" in text
    assert 'alt="NPU memory per step" src="data:image/png;base64,' in text
    assert "new shapes per call site" not in text  # its shapes never change
    ran = run_cli("run", "--emulate", "--forecast-html", str(page), "nanogpt_train.py", cwd=FORECAST)
    assert 'alt="new shapes per call site" src="data:image/png;base64,' in page.read_text()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            ["--forecast", "--torch-npu", "9.9"],
            "no operator table for torch_npu 9.9; tables: 2.1.0.post3, 2.5.1, 2.13.0",
        ),
        (["--forecast", "--chip", "H100"], "--chip H100: the forecast knows 910A, 910B"),
        (["--forecast-json", "missing/f.json"], "--forecast-json missing/f.json: its folder does not exist"),
        (
            ["--forecast-html", "physics_loss.py"],
            "--forecast-html physics_loss.py: an existing file that is not",
        ),
        (
            ["--forecast", "--no-emulate"],
            "--forecast reads the emulated run: it needs the emulation (--emulate)",
        ),
    ],
)
def test_bad_forecast_options_are_one_line_errors(tmp_path, options, message):
    ran = run_cli("run", *options, "physics_loss.py", cwd=FORECAST)
    assert ran.returncode == 2
    assert message in " ".join(ran.stderr.split()), ran.stderr
    assert "Traceback" not in ran.stderr


def test_fused_chances_follow_what_apply_fused(tmp_path):
    """The LLaMA fixture migrated by default computes RMSNorm, rotate_half RoPE and SwiGLU
    unfused; after `apply --unsafe` the first two run torch_npu's fused operators and only the
    SwiGLU of two projections, which no rule swaps, is left."""
    default, unsafe = tmp_path / "default", tmp_path / "unsafe"
    for out, options in ((default, []), (unsafe, ["--unsafe"])):
        applied = run_cli(
            "apply", *options, str(FIXTURES / "llama_tiny" / "src"), "--out", str(out), cwd=tmp_path
        )
        assert applied.returncode in (0, 1), applied.stderr
    chances = {}
    for out in (default, unsafe):
        report = out / "forecast.json"
        ran = run_cli("run", "--emulate", "--forecast-json", str(report), "train.py", cwd=out)
        assert ran.returncode == 0, ran.stderr
        chances[out.name] = sorted(
            f["title"].split(" unfused")[0] for f in found(json.loads(report.read_text()), "fused")
        )
    assert chances == {
        "default": [
            "Attention computes rotary embedding (rotate_half)",
            "MLP computes SwiGLU",
            "RMSNorm computes RMSNorm",
        ],
        "unsafe": ["MLP computes SwiGLU"],
    }


def test_verify_forecasts_the_migrated_side(tmp_path):
    """`verify --forecast`: the emulated migrated side's run, in the terminal report, --json and
    --html; Wan2.1's varlen attention swapped for npu_fusion_attention reads its sequence lengths
    on the host (`.tolist()`), which the forecast names; verify's own replays are not counted."""
    report, page = tmp_path / "verify.json", tmp_path / "verify.html"
    ran = run_cli(
        "verify", str(FIXTURES / "verify" / "wan_dit" / "original"), "--unsafe", "--entry", "entry.py:build",
        "--forecast", "--json", str(report), "--html", str(page), cwd=tmp_path,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "NPU forecast for torch_npu 2.13.0" in ran.stdout
    result = json.loads(report.read_text())["forecast"]
    syncs = found(result, "sync")
    assert [s["sites"] for s in syncs] == [["dit/attention.py:45"], ["dit/attention.py:46"]]
    assert result["steps"] == 8  # the side's forwards (warm-up, timed, recorded), not its replays
    assert "What the NPU will do with it" in page.read_text() and "dit/attention.py:45" in page.read_text()


def test_bfloat16_on_a_chip_without_it_and_a_peak_against_the_card(tmp_path):
    """nanoGPT under bfloat16 autocast: forecast for a 910A (no bfloat16) and not for a 910B;
    apex's prefetcher (2 MiB at its peak) against a card of 0.001 GiB."""
    bf16 = ["nanogpt_train.py", "--dtype", "bfloat16", "--drop-last", "--log-interval", "0"]
    on_910a = forecast(tmp_path, "--chip", "910A", *bf16)
    assert [f["title"].split(" on ")[0] for f in on_910a["findings"]] == ["bfloat16"]
    assert "nanogpt_train.py:26" in on_910a["findings"][0]["sites"]
    assert forecast(tmp_path, "--chip", "910B", *bf16)["findings"] == []
    small = forecast(tmp_path, "--card-memory", "0.001", "leaky_prefetcher.py", "--no-leak")
    (peak,) = found(small, "memory")
    assert peak["title"].startswith("peak NPU memory ") and peak["title"].endswith(
        "against the card's 0.001 GiB"
    )
    assert small["card_gib"] == 0.001
