#!/usr/bin/env bash
# The spec's seven steps on the worked example, exactly as a user types them, then "ask again".
#
#   benchmarks/seven_steps.sh WORKDIR            (backends from YTK_ENGINE/YTK_KERNELGEN/YTK_BUILDER or automatic)
#
# ARCH (default: the spec's Orin), GPU (kernelgen -g; default Orin), YTK_EXAMPLE_SIZE (default full size),
# PROPOSE_ARGS (extra propose flags, e.g. --min-ms 0.01 at tiny sizes), YTK (the CLI, default ytk) and LOG (a file the whole transcript is appended to) are read from the environment.
# Re-running on the same WORKDIR resumes: a step that finished (WORKDIR/.steps/<step>) is not run
# again, so a run cut by a time limit continues where it stopped.
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
mkdir -p .steps
# once KEY cmd...: run a step unless it finished in an earlier run of this script on WORKDIR
once() { local key=$1; shift; if [ -f ".steps/$key" ]; then echo "(already done: $key)" | tee -a "$LOG"; return 0; fi
         step "$@" && touch ".steps/$key"; }

echo "# seven steps: ARCH=$ARCH GPU=$GPU size=${YTK_EXAMPLE_SIZE:-full} engine=${YTK_ENGINE:-auto} kernelgen=${YTK_KERNELGEN:-auto} builder=${YTK_BUILDER:-auto} $(date -u +%FT%TZ)" | tee -a "$LOG"
# Step 1: baseline
once prepare $YTK embedded prepare "$MODEL" --onnx-out base/model.onnx --npz-out base/model.npz --reference-out base/model.reference.npz
once compile_base $YTK embedded compile -a "$ARCH" -p fp16 --onnx base/model.onnx --npz base/model.npz -o base/base.tgz
step $YTK embedded verify base/model.reference.npz base/base.tgz --no-host
# Step 2: where to plug
once propose $YTK embedded propose --profile base/base.tgz --onnx base/model.onnx --fx-nodes base/fx_nodes.json \
  --model "$MODEL" --emit-prepare run_prepare.sh ${PROPOSE_ARGS:-}
cat run_prepare.sh | tee -a "$LOG"
# Step 3: carve
once carve env YTK="$YTK" ./run_prepare.sh
# Steps 4 and 5: a kernel and a plugin per carved region
PLUGINS=()
FAILED=()
for pt2 in gaia/plugin_candidates/*.pt2; do
  name=$(basename "$pt2" .pt2)
  if [ -f ".steps/kgfail_$name" ]; then FAILED+=("$name"); continue; fi
  if once "kg_$name" $YTK kernelgen compile -r "$pt2" -g "$GPU" --config deployment_target=tensorrt \
       -o "gaia/sources/$name.module_source.py"; then
    once "bp_$name" $YTK embedded build-plugin -a "$ARCH" --plugin-name "$name" -s "gaia/sources/$name.module_source.py" \
      -o "gaia/plugins/$name.so"
    PLUGINS+=(--custom-plugin "gaia/plugins/$name.so")
  else
    echo "kernel generation failed for $name: carving again without it" | tee -a "$LOG"
    touch ".steps/kgfail_$name"
    FAILED+=("$name")
  fi
done
if [ ${#FAILED[@]} -gt 0 ]; then
  for name in "${FAILED[@]}"; do sed -i "/\${${name}}=/d" run_prepare.sh; done
  once carve_again env YTK="$YTK" ./run_prepare.sh
fi
# Step 6: rebuild with the plugins
once compile_plugged $YTK embedded compile -a "$ARCH" -p fp16 --onnx gaia/model.onnx --npz gaia/model.npz -o gaia/gaia.tgz "${PLUGINS[@]}"
# Step 7: measure
step $YTK embedded verify base/model.reference.npz base/base.tgz gaia/gaia.tgz
# Then ask again
step $YTK embedded propose --profile gaia/gaia.tgz --onnx gaia/model.onnx --fx-nodes gaia/fx_nodes.json --model "$MODEL" ${PROPOSE_ARGS:-}
