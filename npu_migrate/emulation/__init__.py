"""NPU emulation over CPU (or CUDA): runs migrated code where no NPU exists.

Needs torch; never imported by scan or apply. `SITE` is the folder holding the `torch_npu`
stand-in package; putting it first on sys.path (or PYTHONPATH) makes `import torch_npu` load
the emulation instead of failing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

SITE = Path(__file__).parent / "site"
CANN_HOME = Path(__file__).parent / "cann"  # no toolkit inside: see its README
BACKING_VARIABLE = "NPU_MIGRATE_BACKING"  # cpu, cuda or cuda:N; default: cuda if present, else cpu
NPUS_VARIABLE = "NPU_MIGRATE_NPUS"  # how many NPUs the emulated host has (`run --emulate --npus N`)
TRITON_VARIABLE = "NPU_MIGRATE_TRITON_ASCEND"  # 1: the emulated host has triton-ascend (Inductor on the NPU)
BIN = Path(__file__).parent / "bin"  # the emulated host's tools (npu-smi), first on a launcher's PATH
PYTHON_VARIABLE = "NPU_MIGRATE_PYTHON"  # the interpreter the host's tools run on, whatever PATH says
HOST_BASH = Path(__file__).parent / "host.bash"  # every bash of the run reads it first (BASH_ENV)
BASH_ENV_VARIABLE = "NPU_MIGRATE_BASH_ENV"  # the BASH_ENV the run started with, read after HOST_BASH
MAX_NPUS = 16  # the most NPUs an Ascend host holds (Atlas 900 A3: 16 chips)

_announced = False


def activate(package: str = "torch_npu") -> None:
    """Install the emulation and alias torch_npu's submodules to it (idempotent)."""
    global _announced
    from npu_migrate.emulation import amp, device, npu_module, optim, profiler

    backing = device.install(os.environ.get(BACKING_VARIABLE))
    os.environ.setdefault("ASCEND_HOME_PATH", str(CANN_HOME))  # as CANN's set_env.sh sets it
    aliases = {
        f"{package}.npu": npu_module,
        f"{package}.npu.utils": npu_module,  # its names are torch.npu's (mmengine imports it)
        f"{package}.npu.random": npu_module,  # get/set_rng_state and the seeds (Megatron's tracker)
        f"{package}.npu.amp": amp,
        f"{package}.optim": optim,
        f"{package}.profiler": profiler,
    }
    for name, module in aliases.items():
        sys.modules.setdefault(name, module)
        if name.startswith(f"{package}.npu."):  # `from torch.npu.amp import GradScaler` (mmengine)
            sys.modules.setdefault("torch" + name[len(package) :], module)
    top = sys.modules.get(package)
    if top is not None:
        for name, module in aliases.items():  # `import torch_npu.npu.utils as u` reads attributes
            parent, leaf = name.rsplit(".", 1)
            setattr(top if parent == package else aliases[parent], leaf, module)
        vars(top)["__version__"] = "2.13.0+emulated"
    from npu_migrate.forecast import recorder

    recorder.start_if_asked()
    if not _announced:
        print(f"npu-migrate: torch_npu is emulated on {backing} (no NPU in use)", file=sys.stderr)
        _announced = True


def host_npus() -> int:
    """How many NPUs the emulated host has on a CPU backing (no torch needed: npu-smi asks too)."""
    for variable in (NPUS_VARIABLE, "LOCAL_WORLD_SIZE"):
        value = os.environ.get(variable, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def use_site() -> None:
    """Make `import torch_npu` find the stand-in in this process and in child processes."""
    if str(SITE) not in sys.path:
        sys.path.insert(0, str(SITE))
    os.environ["PYTHONPATH"] = site_pythonpath(os.environ)


def site_pythonpath(env: Mapping[str, str]) -> str:
    """A PYTHONPATH for child processes with the stand-in first."""
    return os.pathsep.join(filter(None, [str(SITE), env.get("PYTHONPATH")]))
