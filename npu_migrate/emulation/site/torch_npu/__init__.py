"""Stand-in for torch_npu, put first on sys.path by `npu-migrate run --emulate` and `verify`
where no NPU exists. Importing it installs the NPU emulation (see npu_migrate.emulation) and
says so on stderr; it is never found unless npu-migrate puts it there."""


def _autoload() -> None:
    """What `import torch` calls through the `torch.backends` entry point (the dist-info beside
    this package), as it loads the real torch_npu: device-agnostic code (`torch.accelerator`)
    finds the NPU without importing torch_npu. Importing this package did the work. Defined
    first: `import torch_npu` before torch imports torch, which asks for it mid-import."""


from npu_migrate.emulation import activate as _activate  # noqa: E402

_activate(__name__)

from npu_migrate.emulation.ops import *  # noqa: E402, F403 - the fused operators, as torch_npu exports them
