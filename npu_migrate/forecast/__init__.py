"""The NPU forecast: what a real NPU will do with a program, read from a run on the emulation
(`npu-migrate run --emulate --forecast`): operators it has no kernel for in a chosen torch_npu
version (they fall back to the CPU), dtypes it runs slowly or not at all, shapes that vary from
step to step, host syncs, memory per step, collectives HCCL refuses, and where the FLOPs go.

`kernels` and `analysis` need no torch (they read a recording); `recorder` runs inside the
emulated process, where torch is."""

from __future__ import annotations

FOLDER_VARIABLE = "NPU_MIGRATE_FORECAST"  # where each process of a run leaves its recording
ROOT_VARIABLE = "NPU_MIGRATE_FORECAST_ROOT"  # the folder whose files are the user's (relative paths)
