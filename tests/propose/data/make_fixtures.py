"""Regenerate the propose test fixtures from a real prepare (and, for the worked example, a mock compile).

    YTK_EXAMPLE_SIZE=1x64x96 ytk embedded prepare contrib/models/efficientvit_b1/model.py \
        --onnx-out /tmp/s/model.onnx --npz-out /tmp/s/model.npz --reference-out /tmp/s/model.reference.npz
    python tests/propose/data/make_fixtures.py /tmp/s tests/propose/data/evit_1x64x96
    python tests/propose/data/make_fixtures.py /tmp/full tests/propose/data/evit_4x1088x1920 --bundle /tmp/full/base.tgz

and, for a carved ("ask again") example, the prepare dir of a `prepare --plugin ...` run with the
bundle compiled from it with its plugins (evit_1x64x96_plugged: LiteMLAC768, LiteMLAC384 and
DwConv3x3s1Dyn, built by the mock kernelgen and builder).

The ONNX is stored without weight values (dims and dtypes kept: propose reads nothing else), and
all files gzipped, so the fixtures stay small. A bundle's profile comes from the mock engine:
its figures are SIMULATED (profile.json says so) and only exercise propose's logic.
"""

from __future__ import annotations

import gzip
import sys
import tarfile
from pathlib import Path


def strip_onnx(src: Path, dst: Path) -> None:
    import onnx

    m = onnx.load(str(src))
    for init in m.graph.initializer:
        for f in ("raw_data", "float_data", "int32_data", "int64_data", "double_data"):
            init.ClearField(f)
    gz_bytes(m.SerializeToString(), dst)


def gz_bytes(data: bytes, dst: Path) -> None:
    # mtime=0 keeps regenerated fixtures byte-identical when nothing changed.
    with open(dst, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as g:
        g.write(data)


def gz(src: Path, dst: Path) -> None:
    gz_bytes(src.read_bytes(), dst)


def main(argv: list[str]) -> None:
    src, dst = Path(argv[0]), Path(argv[1])
    dst.mkdir(parents=True, exist_ok=True)
    strip_onnx(src / "model.onnx", dst / "model.onnx.gz")
    gz(src / "fx_nodes.json", dst / "fx_nodes.json.gz")
    for carve_file in ("plugins.json", "candidates.json"):
        if (src / carve_file).is_file():
            gz(src / carve_file, dst / f"{carve_file}.gz")
    if "--bundle" in argv:
        bundle = Path(argv[argv.index("--bundle") + 1])
        with tarfile.open(bundle) as tf:
            for member, out in (("profile.json", "profile.json.gz"), ("layer_info.json", "layer_info.json.gz"),
                                ("raw_profile.json", "trtexec_profile.json.gz"), ("manifest.json", None)):
                f = tf.extractfile(member)
                data = f.read() if f else b""
                if out is None:
                    (dst / "bundle_manifest.json").write_bytes(data)
                else:
                    gz_bytes(data, dst / out)


if __name__ == "__main__":
    main(sys.argv[1:])
