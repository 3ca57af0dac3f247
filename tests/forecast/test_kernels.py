"""The shipped operator tables are what each torch_npu release's own files say (its wheel,
pinned by hash), and they answer for operators whose NPU kernels came in later releases."""

from __future__ import annotations

import pytest

from npu_migrate.forecast import kernels
from tests.sources import TORCH_NPU, TORCH_NPU_2_1, TORCH_NPU_2_5, fetch

RELEASES = {"2.1.0.post3": TORCH_NPU_2_1, "2.5.1": TORCH_NPU_2_5, "2.13.0": TORCH_NPU}


@pytest.mark.parametrize("version", RELEASES)
def test_shipped_table_is_extracted_from_the_wheel(version):
    found, operators = kernels.from_package(fetch(RELEASES[version]))
    assert found == version
    assert kernels.load(version).operators == operators
    text = (kernels.TABLES / f"torch_npu-{version}.txt").read_text(encoding="utf-8")
    assert text == kernels.table_text(version, operators)


@pytest.mark.parametrize(
    ("name", "overload", "since"),
    [
        ("isin", "Tensor_Tensor", "2.5.1"),  # torch.isin of two tensors
        ("_native_multi_head_attention", "", "2.13.0"),  # nn.MultiheadAttention's fast path
        ("_fft_r2c", "", "2.5.1"),  # torch.fft.rfft
    ],
)
def test_operators_that_came_in_a_later_release(name, overload, since):
    for version in kernels.versions():
        expected = kernels.versions().index(version) >= kernels.versions().index(since)
        assert kernels.load(version).has(name, overload) is expected, version


def test_never_registered_and_always_registered():
    for version in kernels.versions():
        table = kernels.load(version)
        assert not table.has("_transformer_encoder_layer_fwd", "")  # nn.TransformerEncoderLayer's fast path
        assert table.has("addmm", "") and table.has_any("scaled_dot_product_attention")


def test_unknown_version_names_the_tables():
    with pytest.raises(ValueError, match=r"tables: 2\.1\.0\.post3, 2\.5\.1, 2\.13\.0"):
        kernels.load("2.0")
