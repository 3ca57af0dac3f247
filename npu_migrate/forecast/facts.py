"""What the forecast holds the recording against: facts of Ascend NPUs and torch_npu, each with
where it comes from. No torch needed."""

from __future__ import annotations

from dataclasses import dataclass

# HCCL's dtypes, from torch_npu's ProcessGroupHCCL.cpp: `kScalarTypeToHcclDataType` maps these
# (any other raises "Unsupported data type for HCCL process group"), and
# `checkSupportedDataTypeOfAllReduce` takes only the second set for all_reduce and reduce
# ("HCCL AllReduce & Reduce: Unsupported data type ...").
HCCL_DTYPES = frozenset(
    {"uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "bool", "bfloat16"}
)
HCCL_REDUCE_DTYPES = frozenset({"int8", "int16", "int32", "int64", "float16", "float32", "bfloat16"})
REDUCING_COLLECTIVES = frozenset(
    {"allreduce", "allreduce_coalesced", "reduce", "reduce_scatter", "_reduce_scatter_base"}
)
COLLECTIVE_NAMESPACES = ("c10d::", "_c10d_functional::", "c10d_functional::")
IGNORED_NAMESPACES = ("profiler::",)  # record_function markers: no device work

# Operators only the CPU backing runs: torch picked them for the CPU inside a composite (SDPA's
# `_scaled_dot_product_flash_attention_for_cpu`, oneDNN and NNPACK convolutions); on the NPU
# the composite takes its own path, so they say nothing about the device.
BACKING_ONLY_MARKS = ("_for_cpu", "mkldnn", "_nnpack")


@dataclass(frozen=True)
class DtypeFact:
    dtype: str
    harm: int
    what: str
    source: str


DTYPE_FACTS = (
    DtypeFact(
        "float64",
        40,
        "float64 inputs: the NPU's AI Core has no float64 units; torch_npu runs such operators on "
        "the AI CPU (slow) or refuses them, and HCCL cannot all_reduce them",
        "npu-facts: many ops reject double; transfer_to_npu downgrades DoubleTensor to float",
    ),
    DtypeFact(
        "complex128",
        40,
        "complex128 inputs: double precision, which the AI Core does not compute (as float64)",
        "as float64",
    ),
    DtypeFact(
        "float8_e4m3fn",
        60,
        "float8 inputs: torch_npu 2.13 documents float8 only for the Ascend 950's quantized "
        "matrix products; other operators refuse it on Atlas A2 parts",
        "torch_npu 2.13 operator docs (npu_quant_matmul)",
    ),
    DtypeFact("float8_e5m2", 60, "float8 inputs (as float8_e4m3fn)", "as float8_e4m3fn"),
)

# Chips whose AI Core has no bfloat16 (torch.npu.is_bf16_supported() is False there).
NO_BF16_CHIPS = frozenset({"910A"})
CARD_GIB = {"910A": 32, "910B": 64}  # HBM per chip: Atlas 800 (910A) and Atlas 800T A2 (910B) data sheets


@dataclass(frozen=True)
class FusedPattern:
    """Operators a module runs itself (its children's apart) that a torch_npu fused operator
    does in one kernel, and pairs of them that run one right after the other (views aside)."""

    what: str
    operators: frozenset[str]
    fused: str
    pairs: frozenset[str] = frozenset()


FUSED_PATTERNS = (
    FusedPattern(
        "RMSNorm",
        frozenset({"pow", "mean", "rsqrt", "mul"}),
        "torch_npu.npu_rms_norm",
        frozenset({"rsqrt>mul"}),
    ),
    FusedPattern(
        "eager attention (softmax between two matrix products)",
        frozenset({"bmm", "_softmax"}),
        "torch_npu.npu_fusion_attention",
    ),
    FusedPattern("SwiGLU", frozenset({"silu", "mul"}), "torch_npu.npu_swiglu", frozenset({"silu>mul"})),
    FusedPattern(
        "rotary embedding (rotate_half)", frozenset({"neg", "cat", "mul", "add"}), "torch_npu.npu_rotary_mul"
    ),
)
