"""onnxruntime sessions as ytk uses them: CPU provider, warnings off (they repeat per node)."""

from __future__ import annotations

from typing import Any


def cpu_session(model: bytes | str) -> Any:
    """An ``onnxruntime.InferenceSession`` on the CPU for a serialised model or a model path."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
