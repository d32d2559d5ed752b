"""Check an inputs ``.npz`` against the ONNX it feeds, before any engine reads it.

A crafted or damaged npz (an extra key, a flipped byte, an object array, int64 data for a float
input, a wrong shape) used to reach the engine backend and end in a traceback; each is a
:class:`UsageError` naming the array and the fix.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import UsageError
from ..npz import NpzError, read_npz

_HINT = "Use the npz `ytk embedded prepare` wrote beside this ONNX."


def _onnx_inputs(onnx: Path) -> dict[str, tuple[np.dtype | None, list[int | None]]]:
    import onnx as onnx_lib
    from onnx import helper

    try:
        model = onnx_lib.load(str(onnx), load_external_data=False)
    except Exception as e:  # noqa: BLE001  -- protobuf/IO errors of every kind
        raise UsageError(f"--onnx {onnx}: not a readable ONNX model ({type(e).__name__}: {e})") from None
    inits = {t.name for t in model.graph.initializer}
    out: dict[str, tuple[np.dtype | None, list[int | None]]] = {}
    for i in model.graph.input:
        if i.name in inits:
            continue
        tt = i.type.tensor_type
        try:
            dt = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type)) if tt.elem_type else None
        except Exception:  # noqa: BLE001  -- an element type numpy has no dtype for
            dt = None
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim] if tt.HasField("shape") else []
        out[i.name] = (dt, dims)
    return out


def check_npz_inputs(onnx: Path, npz: Path) -> None:
    """Every array in ``npz`` is readable, numeric, an input of ``onnx``, of its dtype and shape."""
    wanted = _onnx_inputs(onnx)
    try:
        arrays = read_npz(npz)
    except NpzError as e:
        raise UsageError(f"--npz {npz}: not a readable .npz ({e}). {_HINT}") from None
    missing = [w for w in wanted if w not in arrays]
    if missing:
        raise UsageError(f"--npz {npz} lacks input(s) {', '.join(missing)} of {onnx.name} (it has "
                         f"{', '.join(sorted(arrays)) or 'nothing'}); {_HINT[0].lower() + _HINT[1:]}")
    extra = sorted(set(arrays) - set(wanted))
    if extra:
        raise UsageError(f"--npz {npz} has array(s) {', '.join(map(repr, extra[:5]))} that are no input of "
                         f"{onnx.name} (its inputs: {', '.join(wanted) or 'none'}). {_HINT}")
    for name, a in arrays.items():
        dt, dims = wanted[name]
        if a.dtype.kind not in "biuf":
            raise UsageError(f"--npz {npz}: array {name!r} has dtype {a.dtype}, not a numeric type. {_HINT}")
        if dt is not None and a.dtype != dt:
            raise UsageError(f"--npz {npz}: array {name!r} is {a.dtype} but {onnx.name} input {name!r} is {dt}. "
                             f"{_HINT}")
        if dims and (len(dims) != a.ndim or any(d is not None and d != s for d, s in zip(dims, a.shape))):
            want = "x".join("?" if d is None else str(d) for d in dims)
            raise UsageError(f"--npz {npz}: array {name!r} has shape {'x'.join(map(str, a.shape)) or 'scalar'} but "
                             f"{onnx.name} input {name!r} is {want}. {_HINT}")
