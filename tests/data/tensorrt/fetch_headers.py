"""Fetch the TensorRT headers the shim tests compile against into ``<version>/include/`` (not committed).

    python tests/data/tensorrt/fetch_headers.py            # every version this script knows a source for

TensorRT 10.14.1: the ``kernel-lens`` 2.0.1 wheel on PyPI bundles NVIDIA's public TensorRT headers
(Apache-2.0, SPDX headers intact) for its own plugin builds; only those files are taken, and each is
checked against the SHA-256 recorded below. The wheel's ``NvInferPlugin.h`` is kernel-lens's own stub,
not NVIDIA's, and is left out. See README.md for the provenance and for TensorRT 8.6.

``make test`` runs this once (the fetched ``NvInferVersion.h`` is its stamp). When the download is
impossible (no network, the index unreachable, a checksum that differs) nothing is written but
``<version>/FETCH_FAILED``, whose one line the shim tests give as their skip reason; the script exits 1.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))
from wheelfetch import fetch_files, run  # noqa: E402

SOURCES = {
    "10.14": {
        "requirement": "kernel-lens==2.0.1",
        "prefix": "kernel_lens/include/tensorrt/",
        "files": {
            "NvInfer.h": "c6f80c7a35999b68106d1a2be05e06275f2e04d1e23eaf17feaa46180b77f31c",
            "NvInferImpl.h": "a6f63415b62e84ba5ac177f113e536cbd07e71fd0e444eef8b1972a62e5c1011",
            "NvInferLegacyDims.h": "3e10fe5b85545f2e956e6935271badf0b1c72553b698000a61d46d69c5d53030",
            "NvInferPluginBase.h": "774e457b2e80f27502ea1aed8132949f6e0788251b5374948e1bfdc9de9fb0ee",
            "NvInferPluginUtils.h": "c1aeed090422a0f214aa3dc334d3e435f3dd3a6cf14caece9fe9ef4daeeb50ec",
            "NvInferRuntime.h": "f98c5aa42512db944fff22e66b2e67fdc1ba65ca525be2cc9f2474f656f01356",
            "NvInferRuntimeBase.h": "f7abd0bca8a2641ad92f270b53e7843a1eaf8c56568cbaf7bf8d5878330c4ec9",
            "NvInferRuntimeCommon.h": "9461c9d07403c5dd1f8a6dea17fa5c3fe5cef7c4290c6768370a1d8139d4ac5d",
            "NvInferRuntimePlugin.h": "d337b34b7b7efc1c65ba3405a6551389063669cb0c51704f91578b5f817999fc",
            "NvInferVersion.h": "950df353f2c1f5d322862e4fd407f5785fc994b146998574da3174dee85855fa",
        },
    },
}


def fetch(version: str) -> Path:
    src = SOURCES[version]
    return fetch_files(src["requirement"], src["prefix"], src["files"], HERE / version / "include")


def failure_note(version: str) -> Path:
    """Where a failed fetch says why (read by the shim tests' skip reason)."""
    return HERE / version / "FETCH_FAILED"


if __name__ == "__main__":
    versions = sys.argv[1:] or sorted(SOURCES)
    sys.exit(run({v: (f"TensorRT {v} headers", lambda v=v: fetch(v)) for v in versions}, failure_note))
