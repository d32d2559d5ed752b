#!/usr/bin/env bash
# On a CPU host with an index, from the repo root: put the wheels the Gaia and Kronos services need and the
# GPU machine's image lacks (FastAPI, Starlette, uvicorn and theirs) into .whl/, beside the ones
# ../shared/device/stage-wheels.sh stages, at the versions requirements/constraints.txt pins. device_env.sh
# installs everything in .whl/; carry ".whl".
set -eu
mkdir -p .whl
pkgs=(fastapi starlette uvicorn anyio h11 annotated-doc opentelemetry-api)
pins=()
for p in "${pkgs[@]}"; do
  pin=$(grep -i "^${p}==" requirements/constraints.txt) || { echo "no pin for $p in requirements/constraints.txt" >&2; exit 1; }
  pins+=("$pin")
done
python3 -m pip download -q --no-deps -d .whl "${pins[@]}"
ls .whl
