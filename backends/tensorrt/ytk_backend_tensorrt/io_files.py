"""model.npz in, outputs.npz out: the raw files ``--loadInputs`` reads and the npz the bundle keeps.

``--loadInputs=name:file`` copies the file's bytes into the input binding: C-contiguous, in the
binding's data type, and exactly ``volume * itemsize`` bytes (trtexec refuses any other size with
"Unexpected file size for input file"; ``loadFromFile`` in ``samples/common/sampleUtils.cpp``). The
binding type is the ONNX input's, except that TensorRT before 10 has no INT64 tensors and binds an INT64
input as INT32, and no tensor type holds FLOAT64 (the parser makes it FLOAT).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ytk_hookspecs.errors import StageError
from ytk_hookspecs.models import write_bytes_atomic

from .versions import TrtVersion


@dataclass(frozen=True)
class GraphTensor:
    name: str
    dtype: np.dtype
    shape: tuple[int | str, ...]  # a str for a dimension the ONNX leaves symbolic

    @property
    def static(self) -> bool:
        return all(isinstance(d, int) and d >= 0 for d in self.shape)


def graph_io(onnx_path: Path) -> tuple[list[GraphTensor], list[GraphTensor]]:
    """The ONNX graph's inputs (initializers excluded) and outputs."""
    import onnx
    from onnx import helper

    model = onnx.load(str(onnx_path), load_external_data=False)
    g = model.graph
    inits = {t.name for t in g.initializer}

    def tensor(v: "onnx.ValueInfoProto") -> GraphTensor:
        tt = v.type.tensor_type
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type)) if tt.elem_type else np.dtype("float32")
        dims: list[int | str] = []
        for d in tt.shape.dim:
            dims.append(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?"))
        return GraphTensor(v.name, dtype, tuple(dims))

    return [tensor(v) for v in g.input if v.name not in inits], [tensor(v) for v in g.output]


def binding_dtype(dtype: np.dtype, version: TrtVersion) -> np.dtype:
    """The type TensorRT gives an input binding of ONNX type ``dtype``."""
    if dtype == np.int64 and version.major < 10:
        return np.dtype(np.int32)
    if dtype == np.float64:
        return np.dtype(np.float32)
    return np.dtype(dtype)


def read_npz(npz: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(npz, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except Exception as e:  # noqa: BLE001  -- numpy/zipfile raise many types on a bad npz
        raise StageError(f"{npz}: not a readable .npz ({type(e).__name__}: {e})") from None


def write_input_files(npz: Path, inputs: list[GraphTensor], directory: Path,
                      version: TrtVersion) -> list[tuple[str, str, tuple[int, ...]]]:
    """One ``<i>.bin`` per ONNX input in ``directory``; returns (name, file name, shape) in input order."""
    arrays = read_npz(npz)
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for i, t in enumerate(inputs):
        if t.name not in arrays:
            raise StageError(f"{npz}: has no array {t.name!r} for the ONNX input of that name "
                             f"(it has {', '.join(sorted(arrays)) or 'none'})")
        a = arrays[t.name]
        fixed = [(d, s) for d, s in zip(t.shape, a.shape) if isinstance(d, int) and d >= 0]
        if len(a.shape) != len(t.shape) or any(d != s for d, s in fixed):
            raise StageError(f"{npz}: {t.name!r} has shape {list(a.shape)}; the ONNX input is {list(t.shape)}")
        want = binding_dtype(t.dtype, version)
        if a.dtype != want:
            if np.issubdtype(a.dtype, np.integer) and np.issubdtype(want, np.integer):
                info = np.iinfo(want)
                if a.size and (a.min() < info.min or a.max() > info.max):
                    raise StageError(f"{npz}: {t.name!r} holds values outside {want} (TensorRT {version} binds this "
                                     f"{t.dtype} input as {want})")
            a = a.astype(want)
        name = f"{i}.bin"
        (directory / name).write_bytes(np.ascontiguousarray(a).tobytes())
        out.append((t.name, name, tuple(int(s) for s in a.shape)))
    return out


def write_outputs_npz(values: dict[str, np.ndarray], outputs: list[GraphTensor], path: Path,
                      origin: str) -> Path:
    """The engine's outputs keyed by ONNX output name, in each output's ONNX type (floats as float32)."""
    arrays = {}
    for t in outputs:
        if t.name not in values:
            raise StageError(f"{origin}: trtexec wrote no values for output {t.name!r} (it wrote "
                             f"{', '.join(sorted(values)) or 'none'})")
        v = values[t.name]
        if np.issubdtype(t.dtype, np.floating):
            arrays[t.name] = v.astype(np.float32)
        elif t.dtype == np.bool_:
            arrays[t.name] = v != 0
        else:
            arrays[t.name] = np.rint(v).astype(t.dtype)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    write_bytes_atomic(path, buf.getvalue())
    return path
