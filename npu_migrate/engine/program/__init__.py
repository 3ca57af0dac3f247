"""The program model: what a file's code does (which code a value guards, where a value flows,
which attributes the code owns, which calls reach compiled CUDA code, whether the file already
keeps a path for the NPU). The engine's holds ask it; no rule or match kind is known here."""

from npu_migrate.engine.program.model import Comparison, DeviceParameter, Guard, NativeCall, Program, Value
from npu_migrate.engine.program.spans import Span

__all__ = ["Comparison", "DeviceParameter", "Guard", "NativeCall", "Program", "Span", "Value"]
