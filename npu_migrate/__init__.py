"""npu-migrate: scan, rewrite and verify PyTorch CUDA code for Huawei Ascend NPUs."""

__version__ = "0.1.0"
