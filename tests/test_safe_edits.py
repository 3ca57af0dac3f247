"""Safe means it still runs: the forms of real code in fixtures/safe_edits (timm's prefetch
loader, detectron2's collect_env and launch, a detection op's CUDA-kernel guard, a test module's
skip condition, an onnxruntime provider choice, transformers-style dual-path helpers), migrated
by `apply` through the command line and then run under the NPU emulation. Each of these ran into
an error or a CUDA request on an NPU before the program model decided the holds."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixture_cases import FIXTURES, run_cli

SOURCES = FIXTURES / "safe_edits" / "src"

# What the migrated files must do under the emulation, in one process (torch is imported once).
CHECK = """
import torch
import torch_npu
import pytest

import accelerators, collect_env, expectations, export_onnx, nms, profile_models, select_device, train

assert "GPU available: False" in collect_env.collect_env_info()  # no CUDA capability asked for
assert export_onnx.session_providers() == ["CPUExecutionProvider"]
assert export_onnx.onnx_requirements() == ["onnx>=1.12.0", "onnxslim", "onnxruntime"]  # not onnxruntime-gpu
assert profile_models.profile_device().type == "npu"  # `torch` is still bound
kept = nms.nms_rotated(torch.randn(6, 5).npu(), torch.rand(6).npu(), 0.5)  # the portable path
assert kept.numel() >= 1
train.main()  # the loader's own is_cuda flag still reads back
assert select_device.select_device("").type == "npu"  # trains on the NPU, not on the CPU
assert pytest.main(["-q", "-p", "no:cacheprovider", "test_kernels.py"]) == pytest.ExitCode.OK  # skipped
assert pytest.main(["-q", "-p", "no:cacheprovider", "test_optim_device.py"]) == pytest.ExitCode.OK
assert pytest.main(["-q", "-p", "no:cacheprovider", "test_device_checks.py"]) == pytest.ExitCode.OK
assert pytest.main(["-q", "-p", "no:cacheprovider", "test_log_memory.py"]) == pytest.ExitCode.OK
assert pytest.main(["-q", "-p", "no:cacheprovider", "test_device_utils.py"]) == pytest.ExitCode.OK
assert pytest.main(["-q", "-p", "no:cacheprovider", "test_device_list.py"]) == pytest.ExitCode.OK
assert pytest.main(["-q", "-p", "no:cacheprovider", "test_strategy_connector.py"]) == pytest.ExitCode.OK
accelerator = accelerators.choose_accelerator()  # the CPU member, as unmigrated
accelerator.setup_device(accelerator.get_parallel_devices([0])[0])
table = {None: "default", "rocm": "rocm values", "npu": "npu values"}
assert expectations.pick({None: "default", "rocm": "rocm values"}, "npu") == "default"
assert expectations.pick(table, expectations.running_device()) == "npu values"
print("all ran")
"""


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("safe_edits") / "npu"
    result = run_cli("apply", str(SOURCES), "--out", str(out), cwd=out.parent)
    assert result.returncode in (0, 1), result.stderr
    return out


def read(root: Path, name: str) -> str:
    return (root / name).read_text()


def test_a_probe_is_kept_where_its_value_leads_to_cuda_only_code(migrated: Path) -> None:
    env = read(migrated, "collect_env.py")
    assert "has_gpu = torch.cuda.is_available()" in env  # it reaches `if has_gpu:` over capability calls
    assert "range(torch.cuda.device_count())" in env
    launch = read(migrated, "launch.py")
    assert "has_gpu = torch.cuda.is_available()" in launch  # "NCCL" if has_gpu: gloo on an NPU, as before
    assert "import torch_npu" not in launch


def test_a_guard_over_a_compiled_kernel_or_a_cuda_provider_keeps_its_cuda_test(migrated: Path) -> None:
    assert "if not boxes.is_cuda:" in read(migrated, "nms.py")
    exporter = read(migrated, "export_onnx.py")
    assert '["CUDAExecutionProvider"] if torch.cuda.is_available() else' in exporter
    assert '("-gpu" if torch.cuda.is_available() else "")' in exporter
    kernels = read(migrated, "test_kernels.py")
    assert "not torch.cuda.is_available() or torch.cuda.get_device_capability()" in kernels
    assert 'device="npu"' in kernels  # code the skip guards is still migrated


def test_a_rewritten_cuda_module_import_still_binds_torch(migrated: Path) -> None:
    """ultralytics' utils/benchmarks.py: the rewrite must keep the `torch` its uses need."""
    code = read(migrated, "profile_models.py")
    assert '"""\n\nimport torch\nimport torch_npu\n\n' in code and "torch.npu.is_available()" in code


def test_a_comparison_with_a_value_left_cuda_keeps_its_cuda_test(migrated: Path) -> None:
    """timm's test_optim: `torch_device` keeps its "cuda" (its use cannot be seen), so the skip
    `torch_device == "cuda" and not torch.cuda.is_available()` must keep asking about CUDA."""
    optim = read(migrated, "test_optim_device.py")
    assert 'elif torch_device == "cuda" and not torch.cuda.is_available():' in optim


def test_the_codes_own_attribute_is_not_renamed(migrated: Path) -> None:
    loader = read(migrated, "prefetch_loader.py")
    assert loader.count(".is_cuda") == 2 and "self.is_npu = " in loader
    assert "torch.npu.Stream()" in loader and 'torch.device("npu")' in loader


def test_a_file_that_keeps_a_path_for_the_npu_stays_byte_identical(migrated: Path) -> None:
    assert (migrated / "hub_utils.py").read_bytes() == (SOURCES / "hub_utils.py").read_bytes()


def test_the_cuda_member_of_a_per_device_family_stays_the_gpu_path(migrated: Path) -> None:
    """Lightning's accelerators/cuda.py beside cpu.py: rewritten, CUDAAccelerator said it could
    run on an NPU host and then refused the NPU devices it made (its device check guards CUDA
    code left)."""
    member = Path("accelerators", "cuda.py")
    assert (migrated / member).read_bytes() == (SOURCES / member).read_bytes()


def test_a_mock_patches_what_the_migrated_code_calls(migrated: Path) -> None:
    """mmengine's log processor test: the mock's dotted target follows the call it stands for."""
    test = read(migrated, "test_log_memory.py")
    assert '@patch("torch.npu.max_memory_allocated", MagicMock(' in test
    assert "torch.npu.max_memory_allocated(device=device)" in read(migrated, "log_memory.py")


def test_a_mock_of_a_name_another_file_keeps_keeps_its_name(migrated: Path) -> None:
    """mmengine's device utilities keep torch.cuda (a path for the NPU beside CUDA): the tests
    that mock their calls by name must mock what they still call."""
    assert (migrated / "device_utils.py").read_bytes() == (SOURCES / "device_utils.py").read_bytes()
    assert (migrated / "test_device_utils.py").read_bytes() == (SOURCES / "test_device_utils.py").read_bytes()


def test_a_device_handed_to_a_comparison_another_file_keeps_keeps_its_cuda(migrated: Path) -> None:
    """Lightning's connector keeps `strategy.parallel_devices[0].type == "cuda"` (there is no NPU
    accelerator to name); its test's CUDA devices, handed on as `parallel_devices=` through a
    parametrized case, must still meet that comparison. The test's other devices are migrated."""
    assert read(migrated, "strategy_connector.py") == read(SOURCES, "strategy_connector.py")
    test = read(migrated, "test_strategy_connector.py")
    assert '[torch.device("cuda", i) for i in range(2)]' in test
    assert 'device="npu" if torch.npu.is_available() else "cpu"' in test


def test_a_device_string_whose_use_the_function_shows_is_migrated(migrated: Path) -> None:
    device = read(migrated, "select_device.py")
    assert 'arg = "npu:0"' in device and "torch.npu.is_available()" in device


def test_cuda_beside_rocm_names_the_cuda_family_and_stays(migrated: Path) -> None:
    """diffusers' Expectations: rewritten, ["npu", "rocm"] would make an NPU a near match for
    ROCm's expected values, where unmigrated it fell back to the default ones."""
    scoring = read(migrated, "expectations.py")
    assert 'device_type in ["cuda", "rocm"] and other_type in ["cuda", "rocm"]' in scoring
    assert 'device = "npu" if torch.npu.is_available() else "cpu"' in scoring


def test_plain_cuda_code_beside_them_is_migrated(migrated: Path) -> None:
    train = read(migrated, "train.py")
    assert "torch.npu.manual_seed_all(0)" in train and ".npu()" in train
    assert "torch.npu.synchronize()" in train


def test_the_migrated_files_run_under_the_emulation(migrated: Path, tmp_path: Path) -> None:
    tree = tmp_path / "run"
    shutil.copytree(migrated, tree)
    (tree / "check.py").write_text(CHECK)
    result = run_cli("run", "--emulate", "check.py", cwd=tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all ran" in result.stdout


def test_each_hold_names_what_it_protects(tmp_path: Path) -> None:
    result = run_cli("scan", str(SOURCES), "--format", "json", cwd=tmp_path)
    findings = json.loads(result.stdout)["findings"]
    held = {(Path(f["file"]).name, f["line"], f["code"]): f["held"] for f in findings if f.get("held")}
    assert "its value reaches `if has_gpu:` (line 11)" in held[("collect_env.py", 9, "NPU101")]
    handed = held[("test_strategy_connector.py", 9, "NPU105")]
    assert "handed on as `parallel_devices=` (line 13)" in handed
    assert "strategy_connector.py:21 (`self._strategy_flag.parallel_devices[0].type == 'cuda'`)" in handed
    assert "NPU106" in held[("collect_env.py", 9, "NPU101")]
    assert "NPU203" in held[("launch.py", 8, "NPU101")]
    assert "`_C.nms_rotated(...)`, a call into a compiled extension" in held[("nms.py", 26, "NPU104")]
    assert "NPU819" in held[("export_onnx.py", 7, "NPU101")]
    assert "NPU820" in held[("export_onnx.py", 15, "NPU101")]
    assert "comes from `device_flags`" in held[("test_device_checks.py", 10, "NPU101")]
    assert "binds `.is_cuda` itself (line 14)" in held[("prefetch_loader.py", 18, "NPU104")]
    assert "keeps a path for the NPU beside CUDA" in held[("hub_utils.py", 21, "NPU101")]
    assert "device_utils.py:15 keeps calling" in held[("test_device_utils.py", 11, "NPU101")]
    assert (
        'it guards code that reads `"cuda"` (NPU108, line 8)' in held[("test_device_list.py", 10, "NPU101")]
    )
    member = "the CUDA member of a family of per-device modules (cpu.py beside it)"
    assert member in held[("cuda.py", 13, "NPU101")]


def test_the_summary_counts_held_fixes_by_reason_and_names_dual_path_files(tmp_path: Path) -> None:
    text = run_cli("scan", str(SOURCES), cwd=tmp_path).stdout
    assert "fix(es) held back so the code is never worse than unmigrated:" in text
    for reason in ("its value guards CUDA code left (4)", "it guards CUDA code left (8)",
                   "the code's own attribute (2)", "a file with an NPU path beside CUDA (6)",
                   "it is compared with a value left CUDA (1)",
                   "a mock of a name another file keeps (2)",
                   "its value reaches a comparison with CUDA another file keeps (1)"):  # fmt: skip
        assert reason in text
    assert "2 file(s) already run on the NPU beside CUDA" in text and "hub_utils.py" in text
    summary = json.loads(run_cli("scan", str(SOURCES), "--format", "json", cwd=tmp_path).stdout)["summary"]
    assert summary["held_by_reason"]["it guards CUDA code left"] == 8
    assert [Path(f).name for f in summary["dual_path_files"]] == ["device_utils.py", "hub_utils.py"]


def test_the_audit_prints_held_fixes_by_reason() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.audit", str(SOURCES)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr  # nothing silent
    assert "src: held by reason: " in result.stdout and "it guards CUDA code left" in result.stdout


def test_a_warm_scan_reads_the_cross_file_reruns_from_the_cache(tmp_path: Path) -> None:
    """The files another file's facts change (a mock another file keeps, a value it compares
    with CUDA) run again knowing them; those reruns are cached by what they knew, so a warm scan
    reports exactly what the cold one did, the cross-file holds included."""
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    cold, warm = (
        run_cli("scan", str(SOURCES), "--format", "json", cwd=tmp_path, env=env).stdout for _ in range(2)
    )
    assert cold == warm
    held = json.loads(warm)["summary"]["held_by_reason"]
    assert held["a mock of a name another file keeps"] == 2
    assert held["its value reaches a comparison with CUDA another file keeps"] == 1
