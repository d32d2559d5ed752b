#!/usr/bin/env bash
# The spec's seven steps on the worked example, exactly as a user types them, then "ask again".
#
#   benchmarks/seven_steps.sh WORKDIR            (backends from YTK_ENGINE/YTK_KERNELGEN/YTK_BUILDER or automatic)
#
# ARCH (default: the spec's Orin), GPU (kernelgen -g; default Orin), YTK_EXAMPLE_SIZE (default full size),
# PROPOSE_ARGS (extra propose flags, e.g. --min-ms 0.01 at tiny sizes), YTK (the CLI, default ytk) and LOG (a file the whole transcript is appended to) are read from the environment.
set -euo pipefail
W=${1:?usage: seven_steps.sh WORKDIR}
REPO=$(cd "$(dirname "$0")/.." && pwd)
MODEL=$REPO/contrib/models/efficientvit_b1/model.py
ARCH=${ARCH:-arm64-sm87-dos6010-cu114-trt86}
GPU=${GPU:-Orin}
YTK=${YTK:-ytk}
LOG=${LOG:-/dev/null}
mkdir -p "$W" && cd "$W"

step() { echo; echo "\$ $*" | tee -a "$LOG"; "$@" 2> >(grep -v '"level": "info"' >&2) | tee -a "$LOG"; }

echo "# seven steps: ARCH=$ARCH GPU=$GPU size=${YTK_EXAMPLE_SIZE:-full} engine=${YTK_ENGINE:-auto} kernelgen=${YTK_KERNELGEN:-auto} builder=${YTK_BUILDER:-auto} $(date -u +%FT%TZ)" | tee -a "$LOG"
# Step 1: baseline
step $YTK embedded prepare "$MODEL" --onnx-out base/model.onnx --npz-out base/model.npz --reference-out base/model.reference.npz
step $YTK embedded compile -a "$ARCH" -p fp16 --onnx base/model.onnx --npz base/model.npz -o base/base.tgz
step $YTK embedded verify base/model.reference.npz base/base.tgz --no-host
# Step 2: where to plug
step $YTK embedded propose --profile base/base.tgz --onnx base/model.onnx --fx-nodes base/fx_nodes.json \
  --model "$MODEL" --emit-prepare run_prepare.sh ${PROPOSE_ARGS:-}
cat run_prepare.sh | tee -a "$LOG"
# Step 3: carve
step env YTK="$YTK" ./run_prepare.sh
# Steps 4 and 5: a kernel and a plugin per carved region
PLUGINS=()
FAILED=()
for pt2 in gaia/plugin_candidates/*.pt2; do
  name=$(basename "$pt2" .pt2)
  if step $YTK kernelgen compile -r "$pt2" -g "$GPU" --config deployment_target=tensorrt \
       -o "gaia/sources/$name.module_source.py"; then
    step $YTK embedded build-plugin -a "$ARCH" --plugin-name "$name" -s "gaia/sources/$name.module_source.py" \
      -o "gaia/plugins/$name.so"
    PLUGINS+=(--custom-plugin "gaia/plugins/$name.so")
  else
    echo "kernel generation failed for $name: carving again without it" | tee -a "$LOG"
    FAILED+=("$name")
  fi
done
if [ ${#FAILED[@]} -gt 0 ]; then
  for name in "${FAILED[@]}"; do sed -i "/\${${name}}=/d" run_prepare.sh; done
  step env YTK="$YTK" ./run_prepare.sh
fi
# Step 6: rebuild with the plugins
step $YTK embedded compile -a "$ARCH" -p fp16 --onnx gaia/model.onnx --npz gaia/model.npz -o gaia/gaia.tgz "${PLUGINS[@]}"
# Step 7: measure
step $YTK embedded verify base/model.reference.npz base/base.tgz gaia/gaia.tgz
# Then ask again
step $YTK embedded propose --profile gaia/gaia.tgz --onnx gaia/model.onnx --fx-nodes gaia/fx_nodes.json --model "$MODEL"
