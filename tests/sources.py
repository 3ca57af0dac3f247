"""Published files the tests need, fetched once from PyPI (pinned by URL and sha256) and unpacked
into a cache shared by every test run: real projects' code, the way a user's checkout arrives
with no one here having written or trimmed it, and the SARIF schema. Projects whose archives
leave their tests out are exported from a git mirror at a pinned commit (Snapshot)."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(os.environ.get("NPU_MIGRATE_SOURCES", Path.home() / ".cache" / "npu-migrate-sources"))
FILES = "https://files.pythonhosted.org/packages"


@dataclass(frozen=True)
class Release:
    """One published archive and the importable package inside it."""

    url: str
    sha256: str
    package: str  # the folder wanted, relative to the archive's top

    @property
    def name(self) -> str:
        return self.url.rsplit("/", 1)[1]


@dataclass(frozen=True)
class Snapshot:
    """One commit of a public repository whose published archives leave the tests out, read from
    a local git mirror (the workplace's `fetch github:OWNER/NAME` brings one to MIRRORS)."""

    repo: str  # owner/name on GitHub
    commit: str  # the full hash: the pin
    paths: tuple[str, ...] = ()  # only these (a mirror may lack some large files' blobs)

    @property
    def name(self) -> str:
        """Its cache folder: the commit, and which paths (a checkout of other paths is another)."""
        chosen = f"-{hashlib.sha256(chr(0).join(self.paths).encode()).hexdigest()[:8]}" if self.paths else ""
        # no `+` in it: tests build regexes from paths
        return f"{self.repo.replace('/', '__')}-{self.commit[:12]}{chosen}"


MIRRORS = Path(os.environ.get("NPU_MIGRATE_MIRRORS", "/work/.mirror"))

X_TRANSFORMERS = Release(
    f"{FILES}/c7/36/9814f909a009d75407ae53e6d771f11a02b2ff9a407df0eed158c369ac62/x_transformers-2.31.10.tar.gz",
    "17f2c50ccb0e2b93f83a84c1374ff7158ed3852310910d6fed26c925776ae403",
    "x_transformers-2.31.10/x_transformers",
)
LLAMA_MODELS = Release(
    f"{FILES}/aa/63/a96295a62a6a299ff9574bb4316a767f83fe7da009de936541ac5191e910/llama_models-0.3.0.tar.gz",
    "6b30bc025ea69021778bc5b5acba1e4b05b47baf4235be284d26b9ea06911f79",
    "llama_models-0.3.0/llama_models",
)
LITGPT = Release(
    f"{FILES}/44/25/f4368c237d2fc30cdcbcc856fe2caf1f9b318e0f6e2846d8c8278345c968/litgpt-0.5.13.tar.gz",
    "77be78814d0334e8e32ee6dac417e9718ebad45529458995ca255af24cf15cf3",
    "litgpt-0.5.13/litgpt",
)
LITGPT_WITH_TESTS = Release(LITGPT.url, LITGPT.sha256, "litgpt-0.5.13")  # the sdist's root: its tests too
SARIF_SCHEMA = Release(  # OASIS's SARIF 2.1.0 JSON Schema, as a SARIF tool's tests carry it
    f"{FILES}/38/00/3f3b0c63fc1ed360bb96c158d919c6a6337aedb1b41952418dd43d507e25/iam_sarif_report-2.3.6.tar.gz",
    "2aa26412a7514dd2e94a2bcbc07862ce39956daaa28ab9993034dc4e1a0abeed",
    "iam_sarif_report-2.3.6/tests/data",
)
ACCELERATE = Release(  # the whole sdist, tests included: verify --tests runs its own suite
    f"{FILES}/8a/6e/c29a1dcde7db07f47870ed63e5124086b11874ad52ccd533dc1ca2c799da/accelerate-1.6.0.tar.gz",
    "28c1ef1846e690944f98b68dc7b8bb6c51d032d45e85dcbb3adb0c8b99dffb32",
    "accelerate-1.6.0",
)
TIMM = Release(  # the whole sdist, tests included (benchmarks/real_tests.py; needs torchvision)
    f"{FILES}/bc/0c/66b0f9b4a4cb9ffdac7b52b17b37c7d3c4f75623b469e388b0c6d89b4e88/timm-1.0.15.tar.gz",
    "756a3bc30c96565f056e608a9b559daed904617eaadb6be536f96874879b1055",
    "timm-1.0.15",
)
ULTRALYTICS = Release(  # the whole sdist, tests included (benchmarks/real_tests.py; needs torchvision)
    f"{FILES}/87/50/019c67cd1ca4d9cc199afb640bd1392dbd3ea2c97bf22f8f4940acebcffc/ultralytics-8.3.100.tar.gz",
    "94a0767a0f1ed3c5e9d16ec620c2412ba87fec32da2a2a29db976b140e4161c6",
    "ultralytics-8.3.100",
)
MEGATRON_CORE = Release(  # Megatron-LM's core at the release Ascend's MindSpeed ports (tests/emulation)
    f"{FILES}/50/12/e0f383e8fe937e46a3e5db422f7687609343c0d4d5a59ec4782b2ba1667a/megatron_core-0.12.1.tar.gz",
    "11c40a1a26713951eaae6f73d5944f921db427cedd0e29b891102685a96d662f",
    "megatron_core-0.12.1/megatron",
)
MEGATRON_LM = Snapshot(  # the same release's training entry points (benchmarks/real_stacks.py)
    "NVIDIA/Megatron-LM", "a845aa7e12b3a117e24c2352b9e3e60bad2e3a17", ("megatron", "pretrain_gpt.py")
)
MEGATRON_LM_TESTS = Snapshot(  # the same release's own unit tests (benchmarks/real_stacks.py)
    "NVIDIA/Megatron-LM",
    "a845aa7e12b3a117e24c2352b9e3e60bad2e3a17",
    ("megatron", "tests/__init__.py", "tests/unit_tests"),
)
MEGATRON_LM_EXAMPLES = Snapshot(  # its launch scripts (benchmarks/stack_blockers.py)
    "NVIDIA/Megatron-LM", "a845aa7e12b3a117e24c2352b9e3e60bad2e3a17", ("examples",)
)
WAN_2_1 = Snapshot(  # Wan2.1's video DiT and its flash-attn attention (benchmarks/real_stacks.py)
    "Wan-Video/Wan2.1", "9737cba9c1c3c4d04b33fcad41c111989865d315", ("wan",)
)
HUNYUAN_VIDEO = Snapshot(  # the video stacks' blockers census (benchmarks/stack_blockers.py)
    "Tencent-Hunyuan/HunyuanVideo",
    "fa14b001c18f37191c938a9ef6baad3b9b472759",
    ("hyvideo", "sample_video.py", "gradio_server.py", "scripts"),
)
SAM2 = Snapshot(  # its whole archive misses a blob in the mirror: the code's folders only
    "facebookresearch/sam2", "2b90b9f5ceec907a1c18123530e92e794ad901a4", ("sam2", "demo", "training", "tools")
)
SAM2_PACKAGE = Snapshot(  # its package alone, for its image predictor (benchmarks/real_stacks.py)
    "facebookresearch/sam2", "2b90b9f5ceec907a1c18123530e92e794ad901a4", ("sam2",)
)
FLUX = Snapshot("black-forest-labs/flux", "802fb4713906133fcbd0d8dc5351620ca4773036", ("src", "demo_gr.py"))
LTX_VIDEO = Snapshot(
    "Lightricks/LTX-Video", "5260738e171955b66c0827f9af7e84d68fd1d919", ("ltx_video", "inference.py", "tests")
)
LIGHTNING = Snapshot(
    "Lightning-AI/pytorch-lightning",
    "7f0c3436cd3f6ad3753125672024fc415cbcb414",
    ("src", "tests", "requirements", "pyproject.toml", "setup.py", "requirements.txt"),
)
KORNIA = Snapshot("kornia/kornia", "b4f5a78a13891c7ac4c1cd9695941380273e981d")
DIFFUSERS_REPO = Snapshot("huggingface/diffusers", "58eb52c0803ea9af3abec60841c2a093bdf1f951")
OPEN_CLIP = Snapshot(
    "mlfoundations/open_clip", "89fb801f1e6087880e951fc8354b8a2077b79c6d", ("src", "tests", "pyproject.toml")
)
MMENGINE = Snapshot("open-mmlab/mmengine", "254342938d9bde1775c39ea7d5181c5d294026c4")
MODELZOO_PORTS = Snapshot(  # Ascend's own ports of public models (benchmarks): what humans changed
    "Ascend/ModelZoo-PyTorch",
    "6a2804a358a5b18e3dac1ab902f41f88e240b00f",
    paths=tuple(
        f"PyTorch/built-in/{path}"
        for path in (
            "foundation/LLaMA-13B",
            "foundation/MiniGPT-4",
            "foundation/GPT-NeoX",
            "cv/classification/DINO_ID3436_for_PyTorch",
            "cv/classification/Beit2_for_PyTorch",
            "foundation/GLM-10B",
            "others/Chinese-CLIP_for_PyTorch",
            "diffusion/diffusers0.18.1/examples/text_to_image",
        )
    ),
)
BOWDPR = Snapshot(  # a retriever's launch scripts pick transformers' optimizer by flag (benchmarks)
    "ma787639046/bowdpr", "5ebd6418c434e224228ebd0ea1fc24d5f1f05214"
)
MAMBA_TRAINING = Snapshot(  # a LoRA fine-tune asks TrainingArguments for apex's AdamW in Python
    "rangehow/mamba_training", "0fde0c6f0382160c37f76fb83e15fd154eb3df9c"
)
PYTORCH_EXAMPLES = Snapshot(  # PyTorch's own DDP tutorial and FSDP2 example (benchmarks/real_trainers.py)
    "pytorch/examples",
    "77f55b912142e11fcfdf5b530231fb9c52f181e8",
    ("distributed/ddp-tutorial-series", "distributed/FSDP2"),
)
NANOGPT = Snapshot(  # nanoGPT's train.py under torchrun (benchmarks/real_trainers.py)
    "karpathy/nanoGPT",
    "3adf61e154c3fe3fca428ad6bc3818b27a3b8291",
    ("train.py", "model.py", "configurator.py"),
)
FLASH_ATTN = (
    Release(  # flash-attn's pure-torch references (flash_attn/utils/testing.py): the stand-ins' judge
        f"{FILES}/3b/b2/8d76c41ad7974ee264754709c22963447f7f8134613fd9ce80984ed0dab7/flash_attn-2.8.3.tar.gz",
        "1e71dd64a9e0280e0447b8a0c2541bad4bf6ac65bdeaa2f90e51a9e57de0370d",
        "flash_attn-2.8.3/flash_attn",
    )
)
XFORMERS = Release(  # xformers' attention biases and its pure-torch reference (attn_bias_utils.py)
    f"{FILES}/c1/fd/e9201fbee6a1a6d7a9c67c24a256ad4c2377bc67a634f7dbeaea23bd668a/xformers-0.0.29.post3.tar.gz",
    "0b77c67ecc3c9fdd8a0e4399e675adf12e2ff40285e00974cca2d09108157f60",
    "xformers-0.0.29.post3/xformers",
)
X_TRANSFORMERS_REPO = Snapshot(  # its archives leave the tests out (benchmarks/real_tests.py: reach)
    "lucidrains/x-transformers", "9252ed7838021ee61e6c5be0930b3a9a88efdf06", ("x_transformers", "tests")
)
NANOCHAT = Snapshot(  # its tests gate on CUDA and compile (benchmarks/real_tests.py: reach)
    "karpathy/nanochat", "92d63d4e8bb4df75c3b71618f31ddde2378b2bcd", ("nanochat", "tests", "pyproject.toml")
)
PEFT_REPO = Snapshot(  # its tests, with their GPU-gated halves (benchmarks/real_tests.py: reach)
    "huggingface/peft", "5d602fdbff04c33c1c4de55cda9d4ae1d7cb7e40", ("src", "tests", "pyproject.toml")
)
TORCH_NPU = Release(  # the real torch_npu's sources, read and never imported (tests of names, ops, kernels)
    f"{FILES}/21/6d/677a6ac5f6696d422a8513e268318ca96ccc8209b4683a6cf6272f43ddd0/"
    "torch_npu-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl",
    "0deb809cf447d3fce636ccfdc9c9f874950f1fe76f18f4aaab31e2d345f7dac0",
    "torch_npu",
)
INTERNVL = Snapshot(  # InternVL chat's model code: InternViT and InternLM2 (benchmarks/customer_models.py)
    "OpenGVLab/InternVL", "2410d1dbf208f0e799459aff9376e5747dbf41a2", ("internvl_chat/internvl",)
)
OPEN_SORA_PLAN = (
    Snapshot(  # Open-Sora Plan v1.3's diffusion transformer and VAE (benchmarks/customer_models.py)
        "PKU-YuanGroup/Open-Sora-Plan", "f7fa604f4e3a523d6b973e4c89a5620ed1aff65a", ("opensora",)
    )
)
TRANSFORMERS_4_30 = Release(  # Hugging Face before SDPA: LlamaAttention's eager attention (benchmarks)
    f"{FILES}/cf/33/b4b6f44f1d0ccf39de69de2fcbcb98847b42594c8d078e216f5369c1292e/transformers-4.30.2.tar.gz",
    "f4a8aac4e1baffab4033f4a345b0d7dc7957d12a4f1ba969afea08205a513045",
    "transformers-4.30.2/src/transformers",
)
TRANSFORMERS_4_46 = Release(  # Hugging Face's SDPA era: LlamaSdpaAttention, Qwen2-VL's vision (benchmarks)
    f"{FILES}/37/5a/58f96c83e566f907ae39f16d4401bbefd8bb85c60bd1e6a95c419752ab90/transformers-4.46.3.tar.gz",
    "8ee4b3ae943fe33e82afff8e837f4b052058b07ca9be3cb5b729ed31295f72cc",
    "transformers-4.46.3/src/transformers",
)
DIFFUSERS_0_21 = Release(  # a Stable Diffusion pipeline's attention processors, SDPA and eager (benchmarks)
    f"{FILES}/f3/a2/bb69b0d51d60003d3b974a685cb29057f67128de1606cef47fdf938e9c13/diffusers-0.21.4.tar.gz",
    "3fac38833179427f167c675dda71ee7b4f5e627200457a8d527e40cdaf972688",
    "diffusers-0.21.4/src/diffusers",
)
DIFFUSERS = Release(
    f"{FILES}/07/7f/53828ff41b86c3274099327627ff5cb7581a2cc9db3bcb39e5212c4140b7/diffusers-0.31.0-py3-none-any.whl",
    "cbc498ae63f4abfc7c3a07649cdcbee229ef2f9a9a1f0d19c9bbaf22f8d30c1f",
    "diffusers",
)
DEEPSPEED = Release(  # its launcher and ZeRO on the emulation (built from source, ops left out)
    f"{FILES}/bc/d8/3162fc810870df1183e686ec70b57028b464a5940b148a90767c727f113c/deepspeed-0.19.8.tar.gz",
    "9e491abd0827ea5c389dd702e15e11e13d83d904bac4a20d6c2a4cb37207a9af",
    "deepspeed-0.19.8",
)
DEEPSPEED_NEEDS = ("hjson==3.1.0", "py-cpuinfo==9.0.0", "msgpack==1.2.4", "ninja==1.13.2")


# Older torch_npu releases, read for which operators each registers (npu_migrate/forecast/kernels)
TORCH_NPU_2_1 = Release(
    f"{FILES}/66/98/3efae2a5e78517ccb1ac0a053f740568e02018c7954cd26b3ef2aaff6d79/"
    "torch_npu-2.1.0.post3-cp310-cp310-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "1baea6cfd82fedf713344c69de4e384087f650457e355a4d0c310f69449016fb",
    "torch_npu",
)
TORCH_NPU_2_5 = Release(
    f"{FILES}/49/8d/1d4ff137afc3240742f28b83c88e71ff90f98fe0c05f859a9559ede983cb/"
    "torch_npu-2.5.1-cp310-cp310-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "54b779aad4754db3e7206847b370672243b8f7a249c5894d0f8192abad7e0b23",
    "torch_npu",
)


def torch_npu_sources() -> Path:
    """The unpacked torch_npu package folder: $TORCH_NPU_REFERENCE where it is set, else the
    pinned wheel, downloaded and unpacked on first use."""
    given = os.environ.get("TORCH_NPU_REFERENCE")
    return Path(given) if given else fetch(TORCH_NPU)


def checkout(snapshot: Snapshot) -> Path:
    """The snapshot's tree, exported from its mirror on first use; a missing mirror or commit is
    a one-line error saying what to fetch."""
    target = CACHE / snapshot.name
    if target.is_dir():
        return target
    mirror = MIRRORS / snapshot.repo.replace("/", "+") / "repo"
    if not mirror.is_dir():
        raise SystemExit(f"no mirror of {snapshot.repo} at {mirror}: fetch github:{snapshot.repo} first")
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as scratch:
        archive = Path(scratch) / "tree.tar"
        done = subprocess.run(
            ["git", "--git-dir", str(mirror), "archive", "-o", str(archive), snapshot.commit,
             *snapshot.paths],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode:
            raise SystemExit(f"{snapshot.repo}@{snapshot.commit}: {done.stderr.strip()}")
        _unpack(archive, target)
    return target


def installed(release: Release, needs: tuple[str, ...], env: dict[str, str]) -> Path:
    """A folder for PYTHONPATH (its `bin` for PATH) holding the release built from its source
    against this environment's torch (no build isolation: an isolated build would download
    another torch) and the pinned packages it `needs`; built once, `env` set for the build."""
    target = CACHE / f"{release.name.removesuffix('.tar.gz')}-installed"
    if not target.is_dir():
        source = fetch(release)
        scratch = Path(tempfile.mkdtemp(dir=CACHE))
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(scratch)]
        build = [*pip, "--no-build-isolation", str(source), *needs]
        subprocess.run(build, env={**os.environ, **env}, check=True)
        try:
            scratch.rename(target)
        except OSError:  # another test process built it meanwhile
            shutil.rmtree(scratch)
    return target


@functools.cache
def fetch(release: Release) -> Path:
    """The release's folder, downloaded and unpacked on first use, and checked once a process
    against its archive (kept beside it and checked against the pinned sha256): a cached tree
    someone changed or emptied is unpacked again, never trusted."""
    target = CACHE / release.name.removesuffix(".tar.gz").removesuffix(".whl")
    archive = CACHE / f"{release.name}.archive"
    if not (archive.is_file() and _sha256(archive) == release.sha256):
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=CACHE) as scratch:
            download = Path(scratch) / release.name
            with urllib.request.urlopen(release.url, timeout=120) as response, download.open("wb") as out:
                shutil.copyfileobj(response, out)
            if (digest := _sha256(download)) != release.sha256:
                raise RuntimeError(f"{release.url}: sha256 {digest}, expected {release.sha256}")
            download.replace(archive)
    if not (target.is_dir() and _holds(target, archive)):
        with tempfile.TemporaryDirectory(dir=CACHE) as scratch:
            if target.exists():  # changed since it was unpacked: set aside, then gone
                target.rename(Path(scratch) / "changed")
            shutil.copy(archive, Path(scratch) / release.name)
            _unpack(Path(scratch) / release.name, target)
    return target / release.package


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _holds(target: Path, archive: Path) -> bool:
    """Whether the unpacked tree holds exactly the archive's files, byte for byte (Python's own
    bytecode caches aside)."""
    members = _members(archive)
    on_disk = {
        path.relative_to(target).as_posix()
        for path in target.rglob("*")
        if path.is_file() and not path.is_symlink() and "__pycache__" not in path.parts
    }
    if on_disk != set(members):
        return False
    return all((target / name).read_bytes() == data for name, data in members.items())


def _members(archive: Path) -> dict[str, bytes]:
    """The archive's regular files by path, as `_unpack` writes them."""
    if archive.name.endswith(".whl.archive"):
        with zipfile.ZipFile(archive) as wheel:
            return {i.filename: wheel.read(i) for i in wheel.infolist() if not i.is_dir()}
    with tarfile.open(archive) as tar:
        files = [m for m in tar.getmembers() if m.isfile()]
        return {m.name: tar.extractfile(m).read() for m in files}  # type: ignore[union-attr]


def _unpack(archive: Path, target: Path) -> None:
    """Unpack beside the archive, then move into place in one rename: a concurrent run unpacking
    the same archive may win, and no one sees a half-unpacked folder."""
    unpacked = archive.parent / "unpacked"
    if archive.name.endswith(".whl"):
        zipfile.ZipFile(archive).extractall(unpacked)
    else:
        with tarfile.open(archive) as tar:
            tar.extractall(unpacked, filter="data")
    try:
        unpacked.rename(target)
    except OSError:
        if not target.is_dir():
            raise
