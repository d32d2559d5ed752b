"""What the depthwise developer tools (dw_sweep, dw_ncu, dw_trace) share: a variant by its name, and
the raw launcher of a variant library they built (no plugin self-description, so not
ytk_backend_nvcc's LauncherLibrary). Import after the tool has put the backends on sys.path."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

from ytk_backend_templates import emit_dwconv
from ytk_backend_templates.regions import DwConvRegion


def variants_by_name(region: DwConvRegion, sm: int) -> dict[str, dict[str, Any]]:
    """Every point of the region's wide space on sm ``sm``, by variant name."""
    return {emit_dwconv.variant_name(p): p for p in emit_dwconv.variant_space(region, wide=True, sm=sm)}


def load_launcher(so: Path, symbol: str = "v0_launch") -> Any:
    """The library's extern "C" launcher (inputs, outputs, extents, workspace, stream) -> cudaError_t."""
    fn = getattr(ctypes.CDLL(str(so)), symbol)
    fn.argtypes = [ctypes.c_void_p] * 5
    fn.restype = ctypes.c_int
    return fn


def pointers(*tensors: Any) -> Any:
    """A launcher's inputs or outputs array for torch tensors."""
    return (ctypes.c_void_p * len(tensors))(*(t.data_ptr() for t in tensors))


def extents(*values: int) -> Any:
    return (ctypes.c_int64 * len(values))(*values)
