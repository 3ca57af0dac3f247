"""Safe means it still runs, measured on real projects' own tests: for each project, `npu-migrate
verify TREE --tests CMD` (and again with --unsafe) runs its test slice on the original and on the
migrated copy under the NPU emulation and compares them test by test. The baseline is the
original's own outcome in the same run: a regression is a test that passed there and fails on
the migrated copy.

    python benchmarks/real_tests.py [--list] [--only NAME] [--bisect]

Each project runs three ways: migrated by default, with --unsafe, and by default with the NPU as
torch's default device for the migrated copy's tests (`--tests-device npu`); "on the NPU" is how
many of the migrated copy's tests that ran put a tensor on the NPU (verify --tests' reach).

Real sources are downloaded once, pinned by sha256, or exported from a git mirror at a pinned
commit (tests/sources.py). Each project's test dependencies must be importable by the Python
that runs this script; each project says what it needs beyond the dev extra, and projects that
need torchvision run from a second environment (`pip install torch==2.14.1 torchvision==0.29.1`
and npu-migrate), one `--only NAME` at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.sources import (
    ACCELERATE,
    DIFFUSERS_REPO,
    KORNIA,
    LIGHTNING,
    LITGPT_WITH_TESTS,
    MMENGINE,
    NANOCHAT,
    OPEN_CLIP,
    PEFT_REPO,
    TIMM,
    ULTRALYTICS,
    X_TRANSFORMERS_REPO,
    Release,
    Snapshot,
    checkout,
    fetch,
)

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Project:
    name: str
    kind: str
    source: Release | Snapshot | Path  # a pinned release or commit, or a bundled fixture
    tests: str  # the pytest command, run in the project's root
    needs: str = ""  # what its tests import beyond the dev extra
    env: tuple[tuple[str, str], ...] = ()  # set for both sides, e.g. to keep it off the network
    timeout: int = 600  # seconds per side


ACCELERATE_TESTS = " ".join(
    f"tests/test_{name}.py"
    for name in ("utils", "memory_utils", "hooks", "optimizer", "scheduler", "modeling_utils", "data_loader",
                 "kwargs_handlers")
)  # fmt: skip


def pytest_run(options: str, paths: str) -> str:
    """A pytest command over the test paths written one or more to a line."""
    return " ".join(["pytest -q", *options.split(), *paths.split()])


PROJECTS = [
    Project("model_zoo (fixture)", "a model zoo (timm, detectron2 forms)", ROOT / "fixtures/model_zoo/src",
            "pytest -q tests"),
    Project("accelerate-1.6.0", "Hugging Face accelerate: a training library that already runs on the NPU",
            ACCELERATE, f"pytest -q -o pythonpath=src {ACCELERATE_TESTS}"),
    Project("timm-1.0.15", "a vision model zoo", TIMM,
            "pytest -q tests/test_layers.py tests/test_utils.py tests/test_optim.py "
            "-k 'adamw or sgd or lamb or lion or test_layers or test_utils'",
            "torchvision expecttest"),
    Project("ultralytics-8.3.100", "a detection library (YOLO): the tests that need no downloaded weights",
            ULTRALYTICS,
            "pytest -q -p no:cacheprovider tests/test_python.py tests/test_cuda.py -k 'model_forward "
            "or all_model_yamls or cfg_init or utils_init or utils_torchutils or utils_ops or nn_modules "
            "or classify_transforms or utils_files or events or utils_checks or utils_patches or test_cuda'",
            "torchvision opencv-python-headless pandas seaborn scipy py-cpuinfo ultralytics-thop",
            (("YOLO_OFFLINE", "1"),)),
    Project("lightning", "Lightning (Fabric and the Trainer): accelerators, device parsing, precision",
            LIGHTNING, pytest_run("-p no:cacheprovider -o pythonpath=src", """
                tests/tests_fabric/accelerators tests/tests_fabric/utilities/test_device_parser.py
                tests/tests_fabric/plugins/precision tests/tests_pytorch/accelerators
                tests/tests_pytorch/trainer/connectors/test_accelerator_connector.py"""),
            "lightning-utilities torchmetrics(--no-deps) fsspec tqdm cloudpickle pytest-timeout"),
    Project("kornia", "differentiable computer vision with device-parametrized tests", KORNIA,
            pytest_run("", """
                tests/geometry/test_boxes.py tests/geometry/epipolar/test_epipolar_metrics.py
                tests/geometry/subpix/test_spatial_softargmax.py tests/core/test_check.py
                tests/augmentation/test_param_validation.py tests/feature/test_steerer.py tests/utils
                tests/geometry/transform/test_affine.py tests/geometry/transform/test_homography_warper.py
                tests/geometry/test_grid.py tests/augmentation/test_backward.py
                tests/augmentation/test_backward_3d.py"""),
            "kornia_rs pytest-timeout pillow"),
    Project("diffusers", "diffusion models and schedulers; already runs on the NPU beside CUDA",
            DIFFUSERS_REPO, pytest_run("-p no:cacheprovider -o pythonpath=src", """
                tests/others/test_ema.py tests/others/test_training.py tests/others/test_utils.py
                tests/models/unets/test_models_unet_2d.py tests/schedulers/test_scheduler_ddpm.py
                tests/schedulers/test_scheduler_euler.py tests/schedulers/test_scheduler_dpm_multi.py
                tests/schedulers/test_schedulers.py tests/models/autoencoders/test_models_autoencoder_kl.py
                tests/models/autoencoders/test_models_vq.py
                tests/models/autoencoders/test_models_autoencoder_tiny.py tests/models/test_activations.py
                tests/models/test_layers_utils.py tests/models/test_attention_dispatch.py"""),
            "huggingface_hub>=1.23,<2 safetensors regex requests importlib_metadata pillow httpx filelock "
            "parameterized pytest-timeout requests-mock accelerate(--no-deps)",
            (("HF_HUB_OFFLINE", "1"),), 1800),
    Project("mmengine", "OpenMMLab's training engine (under mmdet/mmseg); already runs on the NPU in places",
            MMENGINE, pytest_run("-p no:cacheprovider", """
                tests/test_device tests/test_utils/test_dl_utils tests/test_runner/test_amp.py
                tests/test_runner/test_log_processor.py tests/test_model tests/test_structures
                tests/test_logging/test_logger.py tests/test_hooks/test_empty_cache_hook.py
                tests/test_hooks/test_ema_hook.py tests/test_hooks/test_profiler_hook.py
                tests/test_optim/test_optimizer tests/test_dist""")
            + " -k 'not GLOO and not NCCL and not TestZeroOptimizer and (not TestOptimWrapper or Dict)'",
            "addict yapf termcolor rich opencv-python-headless matplotlib parameterized"),
    Project("open_clip", "multimodal (CLIP/SigLIP) models and their training tasks", OPEN_CLIP,
            pytest_run("-o pythonpath=src -p no:cacheprovider", """
                tests/test_loss.py tests/test_params.py tests/test_task_base_unit.py
                tests/test_task_specific_unit.py tests/test_task_fsdp_unit.py tests/test_optim_layer_decay.py
                tests/test_siglip_chunked_loss.py tests/test_retrieval_metrics.py
                tests/test_num_shards.py"""),
            "torchvision timm(--no-deps) transformers(--no-deps) tokenizers safetensors huggingface_hub "
            "regex ftfy sentencepiece braceexpand webdataset pandas",
            (("HF_HUB_OFFLINE", "1"),)),
    Project("x-transformers", "a transformer library whose tests build their models on the default device",
            X_TRANSFORMERS_REPO, "pytest -q -p no:cacheprovider tests/test_x_transformers.py -k 'readme or "
            "kv_cache or cope or adaptive or softclamp or cls_token or value_residual or custom_alibi or "
            "custom_rotary or cross_attn_rotary or multi_latent or attn_pooler or qk_clip'"),
    Project("litgpt-0.5.13", "LLM recipes on Lightning: half of its model tests gated on CUDA GPUs",
            LITGPT_WITH_TESTS,
            "pytest -q -p no:cacheprovider tests/test_model.py tests/test_rope.py",
            "transformers==4.57.1 huggingface_hub==0.35.3 tokenizers==0.22.1 pytest-rerunfailures "
            "(--no-deps)"),
    Project("nanochat", "a full-stack chat LLM: its attention fallback, engine and optimizer tests", NANOCHAT,
            "pytest -q -p no:cacheprovider -o pythonpath=. tests/test_attention_fallback.py "
            "tests/test_engine.py tests/test_optim.py", "kernels tiktoken rustbpe"),
    Project("peft", "parameter-efficient fine-tuning on transformers models", PEFT_REPO,
            "pytest -q -p no:cacheprovider -o addopts= -o pythonpath=src tests/test_custom_models.py "
            "-k 'LoRA and not GLoRA and not Conv and not conv and (forward_output_finite or "
            "training_custom_models or only_params_are_updated or merge_layers or forward_bfloat16 or "
            "safe_merge or disable_adapters)'",
            "transformers==4.57.1 huggingface_hub==0.35.3 tokenizers==0.22.1 accelerate==1.10.1 "
            "diffusers==0.35.2 datasets==4.4.1 dill multiprocess xxhash pyarrow fsspec (--no-deps)",
            (("HF_HUB_OFFLINE", "1"),), 1800),
]  # fmt: skip


def source_tree(project: Project) -> Path:
    if isinstance(project.source, Path):
        return project.source
    return checkout(project.source) if isinstance(project.source, Snapshot) else fetch(project.source)


def verify(project: Project, unsafe: bool, bisect: bool, device: str = "") -> tuple[dict, float]:
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "r.json"
        command = [
            sys.executable,
            "-m",
            "npu_migrate",
            "verify",
            str(source_tree(project)),
            "--tests",
            project.tests,
            "--timeout",
            str(project.timeout),
            "--json",
            str(report),
        ]
        command += ["--unsafe"] * unsafe + ([] if bisect else ["--no-bisect"])
        command += ["--tests-device", device] if device else []
        started = time.monotonic()
        env = {**os.environ, **dict(project.env)}
        done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
        if not report.exists():
            raise SystemExit(f"verify failed on {project.name}:\n{done.stderr[-3000:]}")
        return json.loads(report.read_text()), time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", help="run only the project of this name")
    parser.add_argument("--bisect", action="store_true", help="bisect regressions (slow)")
    parser.add_argument("--list", action="store_true", help="name each project, its kind and needs")
    args = parser.parse_args()
    if args.list:
        for project in PROJECTS:
            print(f"{project.name}: {project.kind}" + (f" (needs {project.needs})" if project.needs else ""))
        return 0
    print(f"{'project':<22} {'apply':<27} {'passed before':>13} {'regressions':>11} {'skipped after':>13} "
          f"{'newly run':>9} {'on the NPU':>12} {'seconds':>8}")  # fmt: skip
    failed = False
    for project in PROJECTS:
        if args.only and project.name != args.only:
            continue
        for unsafe, device in ((False, ""), (True, ""), (False, "npu")):
            data, seconds = verify(project, unsafe, args.bisect, device)
            before = sum(s in ("passed", "xfailed") for s in data["original"]["status"].values())
            after = data["migrated"]["status"]
            newly = sum(
                after.get(t) == "passed" and s == "skipped" for t, s in data["original"]["status"].items()
            )
            regressions = len(data["regressions"]) + len(data["not_run"])
            failed |= regressions > 0
            apply = ("--unsafe" if unsafe else "default") + (f" --tests-device {device}" if device else "")
            reached, ran = data["migrated"]["reach"]
            print(f"{project.name:<22} {apply:<27} {before:>13} {regressions:>11} {len(data['skipped']):>13} "
                  f"{newly:>9} {f'{reached} of {ran}':>12} {seconds:>8.1f}")  # fmt: skip
            for regression in data["regressions"]:
                print(f"    {regression['test']}: {regression['after']}: {regression['message']}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
