"""The ONNX op set the torch engine executes; importing this package registers every op."""

from . import elementwise, nn, reduce, shape  # noqa: F401  (registration side effects)
from .registry import OPS, NodeCtx, OpDef, fp16_safe, to_compute

__all__ = ["OPS", "NodeCtx", "OpDef", "fp16_safe", "to_compute"]
