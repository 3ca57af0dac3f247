"""The forecast on real models in the environment with torchvision (NPU_MIGRATE_TORCHVISION_PYTHON,
torch 2.14.1 and torchvision 0.29.1; the tests' environment has no torchvision):

- torchvision's Faster R-CNN (`fixtures/forecast/torchvision_detection.py`): a vision and
  detection model whose `torchvision.ops` (nms, roi_align) have no NPU kernel, with
  data-dependent `nonzero`;
- Wan2.1's video DiT trained a few steps (`benchmarks/stacks/wan_dit_train.py` on the pinned
  snapshot, after `apply --unsafe`): its RoPE in float64 and complex128, and the host syncs of
  the varlen attention's sequence lengths;
- diffusers' DiT sampled under no_grad (`benchmarks/stacks/diffusers_dit_sample.py`, the pinned
  diffusers wheel on its path): the control, nothing to report.

Each runs as `npu-migrate run --emulate --forecast-json` (npu-migrate from this checkout on
PYTHONPATH); prints each finding's kind and title, and PASS where the expected findings are all
there (and, for the control, nothing else), with the run's wall time.

    NPU_MIGRATE_TORCHVISION_PYTHON=/path/to/python python benchmarks/forecast_real.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.sources import DIFFUSERS, WAN_2_1, checkout, fetch  # noqa: E402

CASES = [  # name, expected (kind, words of the title), whether nothing else may be found
    ("torchvision Faster R-CNN", [("fallback", "torchvision::nms"), ("fallback", "torchvision::roi_align"),
                                  ("shapes", "data-dependent operator (nonzero)")], False),
    ("Wan2.1 DiT, apply --unsafe", [("dtype", "complex128 on the NPU"), ("dtype", "float64 on the NPU"),
                                    ("sync", ".tolist()")], False),
    ("diffusers DiT (control)", [], True),
]  # fmt: skip


def prepare(name: str, scratch: Path, python: str) -> tuple[Path, list[str]]:
    """The folder a case runs in and its script."""
    if name.startswith("torchvision"):
        return ROOT / "fixtures" / "forecast", ["torchvision_detection.py"]
    if name.startswith("diffusers"):
        return ROOT / "benchmarks" / "stacks", ["diffusers_dit_sample.py"]
    source = scratch / "wan-src"
    shutil.copytree(checkout(WAN_2_1) / "wan", source / "wan")
    shutil.copy(ROOT / "benchmarks" / "stacks" / "wan_dit_train.py", source)
    migrated = scratch / "wan"
    subprocess.run(
        [python, "-m", "npu_migrate", "apply", "--unsafe", str(source), "--out", str(migrated)],
        env=environment(), capture_output=True, check=False,
    )  # fmt: skip
    return migrated, ["wan_dit_train.py"]


def environment() -> dict[str, str]:
    diffusers = str(fetch(DIFFUSERS).parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), diffusers])}


def main() -> int:
    python = os.environ.get("NPU_MIGRATE_TORCHVISION_PYTHON")
    if not python or not Path(python).exists():
        print(
            "set NPU_MIGRATE_TORCHVISION_PYTHON to an environment's python with torch==2.14.1 "
            "torchvision==0.29.1"
        )
        return 0
    failed = 0
    with tempfile.TemporaryDirectory(prefix="npu-migrate-forecast-real-") as folder:
        scratch = Path(folder)
        for name, expected, alone in CASES:
            cwd, script = prepare(name, scratch, python)
            report = scratch / f"{len(list(scratch.iterdir()))}.json"
            start = time.perf_counter()
            ran = subprocess.run(
                [python, "-m", "npu_migrate", "run", "--emulate", "--forecast-json", str(report), *script],
                cwd=cwd, env=environment(), capture_output=True, text=True, check=False,
            )  # fmt: skip
            wall = time.perf_counter() - start
            findings = json.loads(report.read_text())["findings"] if report.exists() else []
            missing = [want for want in expected if not any(
                f["kind"] == want[0] and want[1] in f["title"] for f in findings)]  # fmt: skip
            ok = ran.returncode == 0 and not missing and not (alone and findings)
            failed += not ok
            print(f"{'PASS' if ok else 'FAIL'} {name} ({wall:.0f} s, exit {ran.returncode})")
            for finding in findings:
                print(f"    [{finding['kind']}] {finding['title']}  at {', '.join(finding['sites'][:2])}")
            if missing:
                print(f"    missing: {missing}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
