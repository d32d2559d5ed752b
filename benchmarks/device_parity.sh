#!/usr/bin/env bash
# The GPU machine's library versions on a CPU host: a venv with what the device image carries (torch 2.11.0+cu130,
# triton 3.6.0, onnx 1.23.1, onnxruntime 1.30.0, onnxscript 0.7.2, onnx-ir 1.0.0, pluggy 1.6.0, httpx 0.28.1,
# typer 0.27.2; ../shared/device/README.md), our packages installed by device_flow.sh's own line, and the tests run
# with it -- so that code only ever tested against CI's versions (requirements/*.txt) does not first break on the
# device, where every minute counts. No GPU needed: the gpu-marked tests skip, the rest run.
#
#   bash benchmarks/device_parity.sh            build the venv if missing, then the backends' tests (triton, torch,
#                                               templates, nvcc; about 4 min on 2 cores)
#   bash benchmarks/device_parity.sh full       the same, then the whole suite (-x; 15-30 min on 2 cores)
#   bash benchmarks/device_parity.sh venv       only build the venv (and install our packages)
#
# VENV (default /tmp/devparity-venv) names the venv; PYTHON (default python3, >= 3.11) builds it. The device runs
# Python 3.12; any Python >= 3.11 catches the library differences. DEVICE_WHEELS (default ../shared/device-wheels,
# staged for the device by ../shared/device/stage-wheels.sh) supplies hatchling and editables as the device gets
# them; without that folder they come from PyPI. The first build downloads about 4 GB (torch's CUDA libraries
# come with PyPI's torch 2.11.0, the device's own build; they load without a GPU). Run from the repo root.
set -euo pipefail
words=("${@:-tests}")
VENV=${VENV:-/tmp/devparity-venv}
PY=$VENV/bin/python
WHEELS=${DEVICE_WHEELS:-../shared/device-wheels}
source benchmarks/device_install.sh
# the device image's versions; the rest (pytest, hypothesis, ruff, the gaia service's fastapi/uvicorn, matplotlib
# for reports, the zoo's timm stack) as requirements/test.txt and zoo.txt pin them, torchvision paired with torch
DEVICE_PINS=(torch==2.11.0 triton==3.6.0 torchvision==0.26.0 onnx==1.23.1 onnxruntime==1.30.0 onnxscript==0.7.2
             onnx-ir==1.0.0 pluggy==1.6.0 httpx==0.28.1 typer==0.27.2)
OTHERS=(rich numpy pydantic tenacity structlog pyyaml matplotlib fastapi uvicorn pytest hypothesis ruff==0.17.6
        timm==1.0.31 pillow==13.0.0 huggingface_hub==2.4.0 safetensors==0.8.0)

build_venv() {
  [ -x "$PY" ] || "${PYTHON:-python3}" -m venv "$VENV"
  "$PY" -m pip install -q --upgrade pip
  "$PY" -m pip install -q "${DEVICE_PINS[@]}" "${OTHERS[@]}"
  # the editable installs below build with hatchling, and hatchling's editable wheels need editables
  if ls "$WHEELS"/hatchling-*.whl "$WHEELS"/editables-*.whl > /dev/null 2>&1; then
    "$PY" -m pip install -q --no-deps --no-index "$WHEELS"/hatchling-*.whl "$WHEELS"/editables-*.whl
  else
    "$PY" -m pip install -q hatchling editables
  fi
  # the TensorRT headers and aarch64 CUDA runtime some CPU tests compile against (as `make test` fetches them)
  "$PY" tests/data/tensorrt/fetch_headers.py || echo "note: TensorRT headers not fetched; those tests skip"
  "$PY" tests/data/cross/fetch_target.py || echo "note: aarch64 CUDA runtime not fetched; the cross tests skip"
}

install_ours() {
  # device_flow.sh's own line (on every call: the venv may have been made from another checkout), then
  # the backends the device does not install, whose tests are part of the suite
  install_ytk_for_device "$PY"
  "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e backends/gaia -e backends/kronos \
    -e backends/tensorrt
}

versions() {
  "$PY" - <<'EOF'
import importlib
for m in ("torch", "triton", "torchvision", "onnx", "onnxruntime", "onnxscript", "onnx_ir", "pluggy", "httpx", "typer"):
    print(f"{m} {importlib.import_module(m).__version__}")
import ytk_backend_triton
print("ytk_backend_triton from", ytk_backend_triton.__file__)
EOF
}

run_backends() {
  local rc=0 t
  for t in tests/backends/triton tests/backends/torch tests/backends/templates tests/backends/nvcc; do
    echo "== $t"
    "$PY" -m pytest -q -rs -p no:cacheprovider "$t" || rc=1
  done
  return $rc
}

if [ "${words[*]}" = venv ] || ! "$PY" -c 'import torch, triton, pytest, hatchling, editables' 2> /dev/null; then
  build_venv
fi
install_ours
rc=0
for w in "${words[@]}"; do
  case $w in
    venv) versions ;;
    tests) versions; run_backends || rc=1 ;;
    full) versions; run_backends || rc=1
          echo "== the whole suite"; "$PY" -m pytest -q -x -rs -p no:cacheprovider || rc=1 ;;
    *) echo "unknown word $w (venv, tests, full)"; exit 2 ;;
  esac
done
exit $rc
