"""`npu-migrate run`: run a (migrated) script as `python SCRIPT ARGS` would, or a launcher (torchrun,
a launch script) with every process it starts, on a real NPU when torch_npu imports, else on the
emulation (and say so)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import runpy
import subprocess
import sys
import tempfile
import traceback
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from npu_migrate.emulation import (
    BASH_ENV_VARIABLE,
    BIN,
    HOST_BASH,
    NPUS_VARIABLE,
    PYTHON_VARIABLE,
    guards,
    use_site,
)
from npu_migrate.processes import shell_status, stop


def real_torch_npu_imports() -> bool:
    """Whether a real torch_npu is installed and imports (checked in a child process: a broken
    install can take `import torch` down with it)."""
    if importlib.util.find_spec("torch_npu") is None:
        return False
    probe = subprocess.run([sys.executable, "-c", "import torch_npu"], capture_output=True, check=False)
    return probe.returncode == 0


def runs_in_python(script: Path) -> bool:
    """A Python script (by its suffix, else its shebang): run in this process. torchrun's console
    script is one; a bash launch script is not."""
    if script.suffix == ".py":
        return True
    try:
        with script.open("rb") as handle:
            first = handle.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def search_path(emulate: bool) -> str:
    """The PATH a launcher runs with: under the emulation the emulated host's tools (npu-smi),
    then this environment's interpreter and launchers (`python -m torch.distributed.run`,
    `torchrun`, `accelerate` are the ones beside the torch it emulates on), else the caller's."""
    path = os.environ.get("PATH", "")
    if not emulate:
        return path
    return os.pathsep.join([str(BIN), str(Path(sys.executable).parent), path])


def emulate_the_host(npus: int | None) -> None:
    """This process and every process it starts run on the emulated host: they find the stand-in
    torch_npu (PYTHONPATH), the host's tools and this environment's launchers (search_path), and
    `npus` NPUs where it is given (else emulation.host_npus decides). A launch script that sets
    PATH or PYTHONPATH outright keeps npu-smi and the stand-in (host.bash, which bash reads first)."""
    use_site()
    os.environ["PATH"] = search_path(emulate=True)
    os.environ[PYTHON_VARIABLE] = sys.executable
    if os.environ.get("BASH_ENV", str(HOST_BASH)) != str(HOST_BASH):
        os.environ[BASH_ENV_VARIABLE] = os.environ["BASH_ENV"]
    os.environ["BASH_ENV"] = str(HOST_BASH)
    if npus is not None:
        os.environ[NPUS_VARIABLE] = str(npus)


@contextlib.contextmanager
def guards_reported(root: Path) -> Iterator[None]:
    """Count the guarded fused swaps of the tree under `root` in this process and in every
    process it starts, and say on stderr, once the run is over, what their guards decided."""
    with tempfile.TemporaryDirectory(prefix="npu-migrate-guards-") as folder:
        os.environ[guards.FOLDER_VARIABLE], os.environ[guards.ROOT_VARIABLE] = folder, str(root)
        counts = guards.GuardCounts(root.resolve())
        guards.watch_imports(counts)
        try:
            yield
        finally:
            sites = guards.summed(Path(folder))
            for site, outcomes in counts.sites.items():
                sites.setdefault(site, Counter()).update(outcomes)
            if sites:
                lines = "\n".join(guards.described(sites))
                print(
                    f"npu-migrate: guarded fused swaps (fused: the NPU operator ran):\n{lines}",
                    file=sys.stderr,
                )


def run_command(argv: list[str]) -> int:
    """Run a launcher or a launch script as a child process, and with it every process it starts.
    A launch script without its executable bit runs with bash, as `bash train.sh` would; one with
    it, as `./train.sh` would (a bare name is looked up on the PATH, where the script is not)."""
    path = Path(argv[0])
    if path.is_file() and not os.access(path, os.X_OK):
        argv = ["bash", *argv]
    elif path.is_file() and path.parent == Path("."):
        argv = [f".{os.sep}{path}", *argv[1:]]
    launcher = subprocess.Popen(argv)
    try:
        return shell_status(launcher.wait())
    finally:
        stop(launcher)  # what it leaves running: ranks in sessions of their own, daemons


def run_script(script: Path, args: list[str], emulate: bool) -> int:
    """Run `script` as __main__ with `args`; returns its exit code."""
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
    except Exception as exc:  # the script's own failure: as `python SCRIPT` reports it
        traceback.print_exc()
        if emulate:
            _name_the_emulation(exc, script)
        return 1
    return 0


def _name_the_emulation(exc: BaseException, script: Path) -> None:
    """Where the emulation raised the error, say so: the traceback alone reads like torch_npu's.
    The innermost frame of the emulation's or of the script's folder decides (torch's own are
    passed over)."""
    emulation, mine = Path(__file__).resolve().parent, script.resolve().parent
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = Path(frame.filename)
        if not path.is_absolute() or path.resolve() == Path(__file__).resolve():
            continue
        if path.resolve().is_relative_to(mine):
            return
        if path.resolve().is_relative_to(emulation):
            print(
                f"npu-migrate: this error comes from the NPU emulation ({path.name}:{frame.lineno}), "
                "which checks calls as the real torch_npu does: it may be what a real NPU would "
                "reject too, or an operation the emulation does not cover",
                file=sys.stderr,
            )
            return
