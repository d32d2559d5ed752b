#!/usr/bin/env bash
# One call on the GPU machine (device tool): the GPU tests of the nvcc and templates backends, then
# benchmarks/kernels_templates.py. Everything lands in $OUT (logs, results table, reports tarball).
# Carry .whl (wheels the image lacks) and .kcache (nvcc build cache made by --prebuild on a CPU host).
#   bash benchmarks/kernels_device_run.sh [pytest|bench|real|all] [regions]
set -u
what=${1:-all}
regions=${2:-}
OUT=${OUT:-/tmp/kout}
mkdir -p "$OUT"
source benchmarks/device_env.sh || exit 1
export PYTHONPATH=$PYTHONPATH:$PWD/hookspecs:$PWD:$PWD/backends/nvcc:$PWD/backends/templates
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv; nvcc --version | tail -2;
  python3 -c 'import torch; p=torch.cuda.get_device_properties(0); print(torch.__version__, p.name, p.multi_processor_count, p.L2_cache_size)'; } > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
rc=0
if [ "$what" = all ] || [ "$what" = pytest ]; then
  timeout 210 python3 -m pytest -q -m gpu -p no:cacheprovider tests/backends/nvcc tests/backends/templates > "$OUT/pytest.log" 2>&1 || rc=1
  tail -25 "$OUT/pytest.log"
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
  mkdir -p /tmp/kbench
  timeout 330 python3 benchmarks/kernels_templates.py --out /tmp/kbench ${regions:+--regions "$regions"} --workdir /tmp/kbw \
    2> "$OUT/bench.log" || rc=1
  cp /tmp/kbench/kernels_templates.json /tmp/kbench/kernels_templates_ops.json /tmp/kbench/kernels_templates.md "$OUT/" 2>/dev/null
  tar -czf "$OUT/reports.tgz" -C /tmp/kbench . 2>/dev/null
  cat "$OUT/kernels_templates.md" 2>/dev/null || tail -40 "$OUT/bench.log"
fi
if [ "$what" = all ] || [ "$what" = real ]; then
  # the real carve of the worked example (spec's six selectors, prepared at 1x64x96 on a CPU host)
  if [ -d .kcache/realcarve ]; then
    timeout 150 python3 benchmarks/kernels_templates.py --prepare-dir .kcache/realcarve --out /tmp/kreal \
      --workdir /tmp/krw 2> "$OUT/real.log" || rc=1
    cp /tmp/kreal/kernels_templates.md "$OUT/real.md" 2>/dev/null
    cat "$OUT/real.md" 2>/dev/null || tail -20 "$OUT/real.log"
  fi
fi
exit $rc
