"""`npu-migrate run`: run a (migrated) script as `python SCRIPT ARGS` would, on a real NPU when
torch_npu imports, else on the emulation (and say so)."""

from __future__ import annotations

import importlib.util
import runpy
import subprocess
import sys
import traceback
from pathlib import Path


def real_torch_npu_imports() -> bool:
    """Whether a real torch_npu is installed and imports (checked in a child process: a broken
    install can take `import torch` down with it)."""
    if importlib.util.find_spec("torch_npu") is None:
        return False
    probe = subprocess.run([sys.executable, "-c", "import torch_npu"], capture_output=True, check=False)
    return probe.returncode == 0


def run_script(script: Path, args: list[str], emulate: bool) -> int:
    """Run `script` as __main__ with `args`; returns its exit code."""
    if emulate:
        from npu_migrate.emulation import use_site

        use_site()
    sys.argv = [str(script), *args]
    sys.path.insert(0, str(script.resolve().parent))
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exit_:
        code = exit_.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    except Exception:  # the script's own failure: as `python SCRIPT` reports it
        traceback.print_exc()
        return 1
    return 0
