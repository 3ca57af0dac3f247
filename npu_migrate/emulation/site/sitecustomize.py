"""Run at the start of every Python process under `npu-migrate run --emulate` (this folder is
first on its PYTHONPATH): counts the guarded fused swaps of the run's tree (emulation.guards),
then runs the sitecustomize this one hides, if the interpreter has one."""

import importlib.machinery
import importlib.util
import sys
from pathlib import Path

try:
    from npu_migrate.emulation.guards import count_this_process
except ImportError:  # a Python without npu-migrate, which a launch script may start
    pass
else:
    count_this_process()


def _run_the_hidden_one() -> None:
    here = Path(__file__).resolve().parent
    others = [entry for entry in sys.path if entry and Path(entry).resolve() != here]
    spec = importlib.machinery.PathFinder.find_spec(__name__, others)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_run_the_hidden_one()
