"""Reading an ``.npz`` handed to ytk (a user's inputs or reference, an engine's outputs): arrays only, each
name once, no pickles, every failure one line."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np


class NpzError(ValueError):
    """Why an .npz cannot be read; callers put it in their own error with the file's role."""


def read_npz(src: Path | bytes) -> dict[str, np.ndarray]:
    """Every array of ``src`` (a path, or the bytes of an archive), read and CRC-checked now."""
    def handle() -> io.BytesIO | Path:
        return io.BytesIO(src) if isinstance(src, (bytes, bytearray)) else Path(src)

    try:
        if not zipfile.is_zipfile(handle()):
            raise NpzError("not an .npz (a zip archive of .npy arrays)")
        with zipfile.ZipFile(handle()) as z:
            keys = [n.removesuffix(".npy") for n in z.namelist()]  # numpy names "x" and "x.npy" both x
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:  # numpy keeps one copy without a word: which one a reader sees is not the archive's to decide
            raise NpzError(f"array(s) {', '.join(map(repr, twice[:5]))} appear twice in it")
        with np.load(handle(), allow_pickle=False) as z:
            out = {k: z[k] for k in z.files}
        raw = sorted(k for k, v in out.items() if not isinstance(v, np.ndarray))
        if raw:  # a member in no .npy format comes back as bytes
            raise NpzError(f"member(s) {', '.join(map(repr, raw[:5]))} are no .npy arrays")
        return out
    except NpzError:
        raise
    except Exception as e:  # noqa: BLE001  -- zipfile, numpy format and pickle refusals of every kind
        msg = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        if "allow_pickle" in msg:
            raise NpzError("it holds an object array, which ytk never loads (no pickles)") from None
        raise NpzError(f"corrupt: {type(e).__name__}{': ' + msg if msg else ''}") from None
