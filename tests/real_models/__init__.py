"""Real models' published sources with entries for `npu-migrate verify` (see sources.py)."""
