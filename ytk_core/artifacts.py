"""Core-owned artifacts that are not hook payloads."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import ClassVar

from pydantic import Field

from ytk_hookspecs.models import Versioned

PREPARE_MANIFEST = "prepare.json"


class PrepareManifest(Versioned):
    """``prepare.json`` beside the ONNX: how this prepare directory was produced.

    ``verify`` reads it to time the torch model on this machine (the "torch host" row) with the
    same model.py and input size; paths other than ``model`` are relative to the directory.
    Schema 2 added ``taps``; schema 3 ``output_labels``.
    """

    SCHEMA_VERSION: ClassVar[int] = 3

    created: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    model: str = Field(description="absolute path of model.py")
    model_sha256: str
    env: dict[str, str] = Field(default_factory=dict, description="YTK_* variables that shaped the inputs")
    onnx: str
    npz: str
    reference: str
    fx_nodes: str
    plugins: str | None = None
    candidates: str | None = None
    selectors: list[str] = Field(default_factory=list)
    torch_version: str
    taps: str | None = Field(None, description="taps.json when prepared with --debug-taps (every plugin boundary "
                                               "is a graph output; ytk_core.stages.taps)")
    output_labels: dict[str, str] = Field(default_factory=dict, description="ONNX output -> what the model calls "
                                          "it (a returned dict's key, a named tuple's field), where it names them")
