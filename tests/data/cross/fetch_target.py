"""Fetch the CUDA runtime built for aarch64 that the cross-build tests link a plugin against (not committed).

    python tests/data/cross/fetch_target.py

CUDA 13.0 for aarch64: NVIDIA's ``nvidia-cuda-runtime`` 13.0.96 wheel on PyPI for manylinux2014_aarch64
carries ``libcudart_static.a`` and ``libcudadevrt.a`` built for aarch64 -- the files of the target's CUDA
that nvcc links into a plugin's host code (nvcc's headers are the same on every CPU). Only those archives
and ``cuda_runtime_api.h`` (whose ``CUDART_VERSION`` the builder checks against nvcc) are taken, each
checked against the SHA-256 below, into ``cuda-13.0-aarch64/`` -- the directory ``YTK_TARGET_CUDA``
points at in the tests.

``make test`` runs this once (the fetched archive is its stamp); when that is impossible
``cuda-13.0-aarch64.FETCH_FAILED`` says why and the cross-build tests skip with it.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))
from wheelfetch import fetch_files, run  # noqa: E402

TARGET = "cuda-13.0-aarch64"
SOURCE = {
    "requirement": "nvidia-cuda-runtime==13.0.96",
    "platform": "manylinux2014_aarch64",
    "prefix": "nvidia/cu13/",
    "files": {
        "lib/libcudart_static.a": "acc5396c3d11c7950076a2efd9c661e547c7971afd0ba6b97744c72891a5d5a5",
        "lib/libcudadevrt.a": "0675e205f5e2795b2963efd04aec0897cac5be8ca23dc7c3738c8b29187f18d8",
        "include/cuda_runtime_api.h": "3f91d3f84f1aafb17cccc475803f9c489b6474f2a3bf0fbc75a5380821c966e0",
    },
}


def fetch() -> Path:
    return fetch_files(SOURCE["requirement"], SOURCE["prefix"], SOURCE["files"], HERE / TARGET,
                       platform=SOURCE["platform"])


def failure_note(_: str = TARGET) -> Path:
    return HERE / f"{TARGET}.FETCH_FAILED"


if __name__ == "__main__":
    sys.exit(run({TARGET: (f"the CUDA 13.0 runtime for aarch64 ({SOURCE['requirement']})", fetch)}, failure_note))
