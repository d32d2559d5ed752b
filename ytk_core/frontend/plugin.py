"""The built-in ``torch-export`` frontend, registered like any third-party backend."""

from __future__ import annotations

import importlib.util

from ytk_hookspecs import StageContext, hookimpl
from ytk_hookspecs.models import (ArchSpec, Availability, BackendInfo, CarveRequest, CarveResult, TraceRequest,
                                  TraceResult)


class TorchExportFrontend:
    """:class:`ytk_hookspecs.roles.FrontendBackend` on torch.export and the dynamo ONNX exporter."""

    info = BackendInfo(name="torch-export", roles=["frontend"], version="0.1.0",
                       description="trace model.py with torch.export, export ONNX, map ONNX nodes to "
                                   "torch modules, carve regions into custom-op nodes",
                       auto_priority={"frontend": 10})

    def availability(self, arch: ArchSpec | None = None) -> Availability:
        missing = [m for m in ("torch", "onnx", "onnxscript") if importlib.util.find_spec(m) is None]
        if missing:
            return Availability(available=False, reason=f"{', '.join(missing)} not importable")
        return Availability(available=True, reason="torch.export + torch.onnx (dynamo) exporter")

    def trace(self, request: TraceRequest, ctx: StageContext) -> TraceResult:
        from .trace import trace_model

        return trace_model(request, ctx)

    def carve(self, request: CarveRequest, ctx: StageContext) -> CarveResult:
        from .carve import carve

        return carve(request, ctx)


@hookimpl
def ytk_register_backends(register):  # type: ignore[no-untyped-def]
    register(TorchExportFrontend())
