"""Calling a built plugin's extern "C" launcher from Python (ctypes), with or without torch.

The launcher ABI is fixed by :mod:`ytk_hookspecs.models.kernel`::

    int  <launcher>(const void* const* inputs, void* const* outputs, const int64_t* extents,
                    void* workspace, cudaStream_t stream);
    size_t <workspace>(const int64_t* extents);      // optional

:class:`LauncherLibrary` is the raw binding (pointers in, error code checked); :func:`torch_launch`
is the safe entry for torch tensors: it checks every tensor against what the plugin's contract
declares before any pointer reaches the GPU, because a wrong layout there is silent garbage rather
than an error. torch is imported lazily so that this module imports on a machine without it.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any


from . import shape_expr
from .contract import layout_error
from .errors import ContractViolation, StageError
from .models import PluginDescription, PluginMeta
from .models.kernel import C_IDENTIFIER
from .plugin_info import PluginInfoError, read_plugin_description

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["ERROR_STRING_SYMBOL", "LauncherLibrary", "torch_launch"]


#: Exported by every .so the nvcc builder makes, so errors can be named without linking cudart here.
ERROR_STRING_SYMBOL = "ytk_cuda_error_string"

_TORCH_DTYPES = {"float16": "float16", "float32": "float32", "int32": "int32", "int8": "int8"}


class LauncherLibrary:
    """A plugin .so loaded with ctypes: its self-description, its contract and its launcher."""

    def __init__(self, so_path: str | Path, *, launcher: str | None = None, workspace: str | None = None) -> None:
        """Load ``so_path``; ``launcher``/``workspace`` bind other exported symbols of the same ABI
        than the contract names (a kernel generator's library of variants uses this)."""
        self.path = Path(so_path)
        try:
            self.description: PluginDescription = read_plugin_description(self.path)
        except PluginInfoError as e:
            raise StageError(str(e)) from None
        try:
            self.meta: PluginMeta = self.description.plugin_meta()
        except (ValueError, TypeError) as e:  # pydantic's ValidationError and a YAML error are ValueErrors
            raise StageError(
                f"{self.path}: plugin {self.description.name!r} carries no readable plugin_meta in its "
                f"self-description ({type(e).__name__}); rebuild it with `ytk embedded build-plugin`.") from None
        try:
            # RTLD_LOCAL: two plugins may both carry kernels with the same internal symbol names.
            self._lib = ctypes.CDLL(str(self.path.resolve()), mode=ctypes.RTLD_LOCAL)
        except OSError as e:
            raise StageError(f"{self.path}: cannot load plugin {self.description.name!r}: {e}") from None
        self.launcher_symbol = launcher or self.meta.launcher
        self._launch = self._symbol(self.launcher_symbol)
        self._launch.argtypes = [ctypes.c_void_p] * 5
        self._launch.restype = ctypes.c_int
        self._workspace = None
        ws_symbol = workspace or self.meta.workspace
        if ws_symbol:
            self._workspace = self._symbol(ws_symbol)
            self._workspace.argtypes = [ctypes.c_void_p]
            self._workspace.restype = ctypes.c_size_t
        self._err = getattr(self._lib, ERROR_STRING_SYMBOL, None)
        if self._err is not None:
            self._err.argtypes = [ctypes.c_int]
            self._err.restype = ctypes.c_char_p

    def _symbol(self, name: str) -> Any:
        if not isinstance(name, str) or not re.fullmatch(C_IDENTIFIER, name):
            raise ContractViolation(f"{self.path}: symbol {name!r} is not a C identifier")
        try:
            # Item access always looks the name up in the library; getattr would return the CDLL's own
            # attributes for names like '_handle' or '_name'.
            return self._lib[name]
        except AttributeError:
            raise ContractViolation(
                f"{self.path}: plugin {self.meta.plugin_name!r} declares the extern \"C\" symbol {name!r} "
                "but the library does not export it; the kernel source does not honour its contract.") from None

    @property
    def name(self) -> str:
        return self.meta.plugin_name

    # -- raw ABI --------------------------------------------------------------------------------
    def extents(self, input_shapes: Sequence[Sequence[int]]) -> list[int]:
        """The launcher's extents for concrete input shapes (declaration order)."""
        try:
            vals = shape_expr.evaluate_extents(self.meta.extents, input_shapes)
        except shape_expr.ShapeExprError as e:
            raise ContractViolation(f"plugin {self.name!r}: cannot evaluate its extents: {e}") from None
        return [vals[k] for k in self.meta.extents]

    @staticmethod
    def _int64_array(values: Sequence[int]) -> ctypes.Array:
        return (ctypes.c_int64 * max(1, len(values)))(*[int(v) for v in values])

    def workspace_bytes(self, extents: Sequence[int]) -> int:
        """Scratch bytes the launcher needs for these extents (0 when it declares no workspace)."""
        if self._workspace is None:
            return 0
        return int(self._workspace(ctypes.cast(self._int64_array(extents), ctypes.c_void_p)))

    def error_string(self, code: int) -> str:
        if self._err is None:
            return "cudaError"
        raw = self._err(int(code))
        return raw.decode(errors="replace") if raw else "cudaError"

    def launch(self, input_ptrs: Sequence[int], output_ptrs: Sequence[int], extents: Sequence[int],
               workspace_ptr: int | None, stream_handle: int | None) -> None:
        """Call the launcher with raw device pointers; a non-zero return raises :class:`StageError`."""
        if len(input_ptrs) != len(self.meta.inputs) or len(output_ptrs) != len(self.meta.outputs):
            raise ContractViolation(
                f"plugin {self.name!r} takes {len(self.meta.inputs)} input(s) and {len(self.meta.outputs)} "
                f"output(s); got {len(input_ptrs)} and {len(output_ptrs)}")
        if len(extents) != len(self.meta.extents):
            raise ContractViolation(f"plugin {self.name!r} takes {len(self.meta.extents)} extent(s) "
                                    f"({', '.join(self.meta.extents)}); got {len(extents)}")
        ins = (ctypes.c_void_p * max(1, len(input_ptrs)))(*[int(p) for p in input_ptrs])
        outs = (ctypes.c_void_p * max(1, len(output_ptrs)))(*[int(p) for p in output_ptrs])
        ext = self._int64_array(extents)
        rc = self._launch(ctypes.cast(ins, ctypes.c_void_p), ctypes.cast(outs, ctypes.c_void_p),
                          ctypes.cast(ext, ctypes.c_void_p), workspace_ptr or None, stream_handle or None)
        if rc != 0:
            raise StageError(f"plugin {self.name!r} ({self.path}): launcher {self.launcher_symbol} returned "
                             f"cudaError {rc} ({self.error_string(rc)}) for extents {list(extents)}")


# -- torch ------------------------------------------------------------------------------------------
def _check_tensor(lib: LauncherLibrary, kind: str, i: int, t: "torch.Tensor", contract: Any,
                  device: "torch.device", expect_shape: list[int] | None) -> None:
    import torch

    where = f"plugin {lib.name!r} {kind} {i} ({contract.name})"
    if not isinstance(t, torch.Tensor):
        raise ContractViolation(f"{where}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device != device:
        raise ContractViolation(f"{where}: on {t.device}, expected {device} like the first input")
    want = getattr(torch, _TORCH_DTYPES[contract.dtype])
    if t.dtype != want:
        raise ContractViolation(f"{where}: dtype {t.dtype}, the plugin declares {contract.dtype}")
    if contract.format == "kHWC8":
        if t.dim() != 4 or not t.is_contiguous(memory_format=torch.channels_last):
            raise ContractViolation(f"{where}: format kHWC8 needs a 4-D channels_last contiguous tensor "
                                    f"(x.contiguous(memory_format=torch.channels_last)); got shape "
                                    f"{list(t.shape)} strides {list(t.stride())}")
        why = layout_error(contract.format, list(t.shape))
        if why:
            raise ContractViolation(f"{where}: {why}")
    elif contract.format == "kLINEAR":
        if not t.is_contiguous():
            raise ContractViolation(f"{where}: format kLINEAR needs a contiguous tensor")
    else:
        raise ContractViolation(f"{where}: format {contract.format} is not supported by the torch launcher")
    if expect_shape is not None and list(t.shape) != expect_shape:
        raise ContractViolation(f"{where}: shape {list(t.shape)}, the contract says {expect_shape}")


def _shape_of(lib: LauncherLibrary, contract: Any, input_shapes: list[list[int]], ext: dict[str, int]) -> list[int]:
    try:
        return [shape_expr.evaluate(e, input_shapes, ext) for e in contract.shape]
    except shape_expr.ShapeExprError as e:
        raise ContractViolation(f"plugin {lib.name!r}: shape of {contract.name}: {e}") from None


def torch_launch(lib: LauncherLibrary, inputs: Sequence["torch.Tensor"], outputs: Sequence["torch.Tensor"],
                 stream: Any = None) -> None:
    """Run the plugin on torch CUDA tensors, writing ``outputs`` in place.

    Every tensor is checked against the contract (dtype, kHWC8 = channels_last 4-D, kLINEAR =
    contiguous, shapes from the contract's expressions) before launch. The launch goes on
    ``stream`` (a ``torch.cuda.Stream``) or the current torch stream of the inputs' device; the
    workspace comes from torch's caching allocator on that stream.
    """
    import torch

    meta = lib.meta
    if len(inputs) != len(meta.inputs) or len(outputs) != len(meta.outputs):
        raise ContractViolation(f"plugin {lib.name!r} takes {len(meta.inputs)} input(s) and "
                                f"{len(meta.outputs)} output(s); got {len(inputs)} and {len(outputs)}")
    if not inputs or not isinstance(inputs[0], torch.Tensor) or inputs[0].device.type != "cuda":
        raise ContractViolation(f"plugin {lib.name!r}: inputs must be CUDA tensors")
    device = inputs[0].device
    in_shapes = [list(t.shape) for t in inputs]
    ext_vals = lib.extents(in_shapes)
    ext = dict(zip(meta.extents, ext_vals))
    for i, (t, c) in enumerate(zip(inputs, meta.inputs)):
        _check_tensor(lib, "input", i, t, c, device, _shape_of(lib, c, in_shapes, ext))
    for i, (t, c) in enumerate(zip(outputs, meta.outputs)):
        _check_tensor(lib, "output", i, t, c, device, _shape_of(lib, c, in_shapes, ext))
    in_ptrs = {t.data_ptr() for t in inputs}
    if any(t.data_ptr() in in_ptrs for t in outputs):
        raise ContractViolation(f"plugin {lib.name!r}: an output aliases an input; kernels assume they do not")
    with torch.cuda.device(device):
        s = stream if stream is not None else torch.cuda.current_stream(device)
        nbytes = lib.workspace_bytes(ext_vals)
        ws = None
        if nbytes:
            with torch.cuda.stream(s):
                ws = torch.empty(nbytes, dtype=torch.uint8, device=device)
        lib.launch([t.data_ptr() for t in inputs], [t.data_ptr() for t in outputs], ext_vals,
                   ws.data_ptr() if ws is not None else None, s.cuda_stream)
