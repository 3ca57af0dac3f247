"""`npu-migrate verify`: the original and the migrated project run side by side, each in its own
process (`side.py`); their module outputs, training steps and memory are compared here
(`compare.py`) and reported (`report.py`). Needs torch; never imported by scan or apply."""
