"""The forecast on real models from their published sources (tests/sources.py), migrated by
`verify TREE --unsafe --forecast`: diffusers' DiT under no_grad has nothing to report (the
control); Meta's Llama 3 reference, through fairscale's vocabulary-parallel embedding, masks its
input with a boolean index (data-dependent work) and keeps a SwiGLU of two projections that no
rule fuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.forecast.test_forecast_cli import found
from tests.verify.test_real_models import MODELS, real_tree, verify

pytest.importorskip("torch")


def forecast_of(name: str, tmp_path: Path) -> dict:
    code, data, output = verify(tmp_path, real_tree(MODELS[name], tmp_path), "--unsafe", "--forecast")
    assert code == 0, output
    assert data["passed"] and data["forecast"]["npu_calls"] > 1000
    return data["forecast"]


def test_diffusers_dit_forecasts_nothing(tmp_path):
    result = forecast_of("dit", tmp_path)
    assert result["findings"] == [], [f["title"] for f in result["findings"]]
    assert {m["module"] for m in result["hot_modules"][:2]} <= {
        "DiTTransformer2DModel.transformer_blocks.0", "DiTTransformer2DModel.transformer_blocks.1"
    }  # fmt: skip


def test_llama3_reference_forecasts_its_masks_and_its_swiglu(tmp_path):
    result = forecast_of("llama3-reference", tmp_path)
    masks = found(result, "shapes")
    assert [f["title"] for f in masks] == ["data-dependent operator (index_put_)"] * 2
    assert all(f["sites"][0].endswith("(from llama_models/llama3/model.py:351)") for f in masks)
    assert all(f["sites"][0].startswith("fairscale/nn/model_parallel/layers.py:") for f in masks)
    assert [f["title"].split(" unfused")[0] for f in found(result, "fused")] == [
        "FeedForward computes SwiGLU"
    ]
    assert {f["kind"] for f in result["findings"]} == {"shapes", "fused"}
