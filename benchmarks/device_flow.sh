#!/usr/bin/env bash
# On the GPU machine (device tool), from the repo root, carrying .whl and .kcache (.whl: ../shared/device/stage-wheels.sh,
# and for the zoo words benchmarks/stage_zoo_wheels.sh, the pinned timm):
#   bash benchmarks/device_flow.sh flow      the spec's seven steps at full size (runs/flow)
#   bash benchmarks/device_flow.sh table     the one-run table of runs/flow's engines vs torch and torch.compile
#   bash benchmarks/device_flow.sh autoloop  ytk autoloop on the worked example (runs/autoloop)
#   bash benchmarks/device_flow.sh gputests  every GPU test: backends (torch, nvcc, templates), conformance, the rest
#   bash benchmarks/device_flow.sh pytest    the tests PYTEST_ARGS names (verbose; PYTEST_TIMEOUT, default 400 s)
#   bash benchmarks/device_flow.sh zoo       per corpus model in ZOO_MODELS (contrib/zoo/<name>.py): ytk autoloop
#                                            at ZOO_SIZE (default 4x1088x1920) and its one-run table (MAX_AUTOTUNE=1
#                                            adds torch.compile max-autotune, INDUCTOR=1 the base and plugged
#                                            engines in the torch engine's inductor mode; ZOO_NO_TABLE=1 skips the table;
#                                            each model's workdir is removed after its table unless ZOO_KEEP=1)
#   bash benchmarks/device_flow.sh zootable  the tables again for ZOO_MODELS whose autoloop ran on this warm machine
#   bash benchmarks/device_flow.sh families  where the time goes in ZOO_MODELS (default: the depthwise-heavy ones), by op
#                                            family: benchmarks/zoo.py --engine torch --stop-after propose --families at
#                                            ZOO_SIZE (default 4x1088x1920; a model that cannot take it keeps its own)
#   bash benchmarks/device_flow.sh admission the admission gate against the planted kernels (benchmarks/admission_suite.py)
#   bash benchmarks/device_flow.sh regions   per carved region of runs/zoo/<ZOO_MODELS>/round1/prepare: torch, torch.compile,
#                                            templates, triton, floor (benchmarks/region_table.py; after `zoo` with ZOO_KEEP=1),
#                                            or of the carve directories REGIONS_DIRS names (relative to the repo root);
#                                            REGIONS_ONLY=<names> tables only those candidates
#   bash benchmarks/device_flow.sh gaia      `autoloop`'s run through a Gaia service on loopback (runs/autoloop-gaia), both
#                                            reports' results side by side (run `autoloop` first on the same machine)
#   bash benchmarks/device_flow.sh kronos    `autoloop`'s run with every compile on a Kronos worker (torch engine) on
#                                            loopback (runs/autoloop-kronos), compared the same way
#   bash benchmarks/device_flow.sh both      `autoloop`'s run with its kernels and plugins from a Gaia service and every
#                                            compile on a Kronos worker, both on loopback (runs/autoloop-both), compared
#                                            the same way, with both reports' time per stage
#   bash benchmarks/device_flow.sh cachepack this machine's nvcc build cache into $OUT (nvcc.tar.xz.part-*, 15 MiB each) to
#                                            carry as .kcache next time (put last: what the words before compiled)
#   bash benchmarks/device_flow.sh carve     a full-size carve of CARVE_MODEL with the selectors in CARVE_PLUGINS (';'
#                                            between them) into runs/rt/<model>; a `regions` word after it tables it
# Several words run in the order given ("autoloop table"). runs/ is ignored by git, so a machine that is
# still warm keeps it (and the kernel cache in runs/ytkcache) for the next call.
# engine=torch (ENGINE_MODE=inductor or inductor-max-autotune: its inductor mode), kernelgen=templates
# (KERNELGEN=templates,triton adds the triton generator), builder=nvcc. Logs and
# small artifacts go to $OUT.
set -u
words=("${@:-flow}")
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
unset PYTHONPATH; source benchmarks/device_env.sh || exit 1
source benchmarks/device_install.sh
install_ytk_for_device python3 > "$OUT/install.log" 2>&1 || { tail "$OUT/install.log"; exit 1; }
export YTK_TEMPLATES_CACHE=/tmp/kcache/nvcc YTK_CACHE_DIR=$PWD/runs/ytkcache  # a build cache even without one carried
export YTK_ENGINE=torch YTK_KERNELGEN=${KERNELGEN:-templates} YTK_BUILDER=nvcc  # KERNELGEN=templates,triton: the chain
ARCH=x86_64-sm90-linux-cu130-trt10
if [ -n "${ENGINE_MODE:-}" ]; then  # ENGINE_MODE=inductor: the torch engine's inductor mode for every engine compiled
  printf '[backends.torch]\nmode = "%s"\n' "$ENGINE_MODE" > /tmp/ytk_engine_mode.toml
  export YTK_CONFIG=/tmp/ytk_engine_mode.toml
fi
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch; print("torch", torch.__version__)'
  python3 -c 'import timm; print("timm", timm.__version__, "(requirements/zoo.txt pins", open("requirements/zoo.txt").read().split("timm==")[1].split()[0] + ": benchmarks/stage_zoo_wheels.sh stages it)")' 2>&1 | tail -1; ytk backends; echo "torch engine mode: ${ENGINE_MODE:-eager}"
  if [ -d /tmp/kcache/nvcc ]; then echo "nvcc build cache: $(ls /tmp/kcache/nvcc | wc -l) files in /tmp/kcache/nvcc"
  else echo "nvcc build cache: none carried: kernel generation compiles every variant here (minutes per model;"\
    "make one with benchmarks/kernels_templates.py --prebuild on a CPU host and carry .kcache)"; fi; } > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
W=$PWD/runs/flow
do_flow() {
  ARCH=$ARCH GPU=H200 LOG=$OUT/flow.log timeout ${FLOW_TIMEOUT:-540} bash benchmarks/seven_steps.sh "$W" > "$OUT/flow.stdout" 2> "$OUT/flow.stderr"
  echo "seven steps rc=$?"
  cp "$W/run_prepare.sh" "$OUT/" 2>/dev/null
  tar -czf "$OUT/kernel_reports.tgz" -C "$W/gaia" sources 2>/dev/null
  grep -v '^│\|^┃\|^┏\|^┡\|^└' "$OUT/flow.log" | tail -40
}
do_table() {
  # TABLE_FROM=autoloop: the autoloop's baseline and final engines instead of the seven steps'
  if [ "${TABLE_FROM:-flow}" = autoloop ]; then
    A=$PWD/runs/autoloop
    BASE=$A/round0/base.tgz NPZ=$A/round0/prepare/model.npz REF=$A/round0/prepare/model.reference.npz
    PLUGGED=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["best"]["bundle"])' "$A/autoloop.json")
    PLUGGED=$A/$PLUGGED
  else
    BASE=$W/base/base.tgz NPZ=$W/base/model.npz REF=$W/base/model.reference.npz PLUGGED=$W/gaia/gaia.tgz
  fi
  timeout ${TABLE_TIMEOUT:-150} python3 benchmarks/flow_table.py --base "$BASE" --plugged "$PLUGGED" \
    --model contrib/models/efficientvit_b1/model.py --npz "$NPZ" --reference "$REF" \
    --json "$OUT/flow_table.json" > "$OUT/flow_table.txt" 2>&1
  echo "flow_table rc=$?"
  tail -15 "$OUT/flow_table.txt"
}
do_gputests() {
  # backends' GPU tests are marked gpu; the conformance suite runs every backend that can run here
  timeout -s INT -k 20 ${GPUTESTS_TIMEOUT:-400} python3 -m pytest -v --tb=short -rfE -m gpu -p no:cacheprovider tests/backends > "$OUT/gputests.log" 2>&1
  echo "gpu tests rc=$?"
  timeout -s INT -k 20 ${GPUTESTS_TIMEOUT:-400} python3 -m pytest -v --tb=short -rfEs -p no:cacheprovider tests/conformance >> "$OUT/gputests.log" 2>&1
  echo "conformance rc=$?"
  # every other GPU-marked test: the admission gate, debug taps on the torch engine, gaia, hookspecs
  timeout -s INT -k 20 ${GPUTESTS_TIMEOUT:-400} python3 -m pytest -v --tb=short -rfEs -m gpu -p no:cacheprovider tests --ignore=tests/backends \
    --ignore=tests/conformance >> "$OUT/gputests.log" 2>&1
  echo "other gpu tests rc=$?"
  tail -25 "$OUT/gputests.log"
}
do_pytest() {  # PYTEST_ARGS on this machine, e.g. PYTEST_ARGS="-m gpu tests/trust"; interrupted (SIGINT) at
  # PYTEST_TIMEOUT so the failures so far are still reported
  # PYTEST_ARGS is split as the shell would split it, so a quoted -k expression stays one argument
  local args; eval "args=(${PYTEST_ARGS:?say which tests})"
  timeout -s INT -k 20 ${PYTEST_TIMEOUT:-400} python3 -m pytest -v --tb=short -rfEs -p no:cacheprovider \
    "${args[@]}" > "$OUT/pytest.log" 2>&1
  echo "pytest rc=$?"
  grep -E ' (PASSED|FAILED|ERROR|SKIPPED)|^(FAILED|ERROR) |passed|failed' "$OUT/pytest.log" | tail -40
}
do_autoloop() {
  timeout ${AUTOLOOP_TIMEOUT:-420} ytk autoloop contrib/models/efficientvit_b1/model.py -a "$ARCH" -p fp16 --workdir runs/autoloop \
    --max-rounds "${ROUNDS:-2}" --min-gain-ms "${MIN_GAIN:-0.1}" --json > "$OUT/autoloop.json" 2> "$OUT/autoloop.stderr"
  echo "autoloop rc=$?"
  cp runs/autoloop/report/* "$OUT/" 2>/dev/null
  cat runs/autoloop/report/autoloop_report.md 2>/dev/null | head -80 || tail -30 "$OUT/autoloop.stderr"
}
zoo_table() {  # the one-run table of runs/zoo/$1's base and best bundles
  local m=$1 A=$PWD/runs/zoo/$1 P
  P=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["best"]["bundle"])' "$A/autoloop.json") \
    || { echo "$m: no autoloop result in $A"; tail -5 "$OUT/zoo_$m.autoloop.stderr" 2>/dev/null; return; }
  YTK_EXAMPLE_SIZE=${ZOO_SIZE:-4x1088x1920} timeout ${TABLE_TIMEOUT:-300} python3 benchmarks/flow_table.py \
    --base "$A/round0/base.tgz" --plugged "$A/$P" --model "contrib/zoo/$m.py" \
    --npz "$A/round0/prepare/model.npz" --reference "$A/round0/prepare/model.reference.npz" \
    ${MAX_AUTOTUNE:+--max-autotune} ${INDUCTOR:+--inductor-engines} --json "$OUT/zoo_$m.table${MAX_AUTOTUNE:+_ma}.json" \
    > "$OUT/zoo_$m.table${MAX_AUTOTUNE:+_ma}.txt" 2>&1
  echo "$m table rc=$?"
  grep -v '^{' "$OUT/zoo_$m.table${MAX_AUTOTUNE:+_ma}.txt" | tail -9
}
do_zoo() {
  for m in ${ZOO_MODELS:?name the corpus models, e.g. ZOO_MODELS=mobilenetv3_large_100}; do
    local A=$PWD/runs/zoo/$m
    YTK_EXAMPLE_SIZE=${ZOO_SIZE:-4x1088x1920} timeout ${AUTOLOOP_TIMEOUT:-420} ytk autoloop "contrib/zoo/$m.py" \
      -a "$ARCH" -p fp16 --workdir "$A" --max-rounds "${ROUNDS:-1}" --min-gain-ms "${MIN_GAIN:-0.05}" --json \
      > "$OUT/zoo_$m.autoloop.json" 2> "$OUT/zoo_$m.autoloop.stderr"
    echo "$m autoloop rc=$?"
    cp "$A/report/autoloop_report.md" "$OUT/zoo_$m.report.md" 2>/dev/null
    [ -n "${ZOO_NO_TABLE:-}" ] || zoo_table "$m"
    # a full-size workdir holds GBs of captures and bundles: the next model needs the disk (ZOO_KEEP=1 keeps it)
    [ -n "${ZOO_KEEP:-}${ZOO_NO_TABLE:-}" ] || rm -rf "$A"
  done
}
do_admission() {
  timeout ${ADMISSION_TIMEOUT:-300} python3 benchmarks/admission_suite.py --workdir runs/admission --jobs 4 \
    > "$OUT/admission_suite.txt" 2>&1
  echo "admission suite rc=$?"
  python3 benchmarks/admission_suite.py --workdir runs/admission --only exact --json > "$OUT/admission_exact.json" 2>&1
  cat "$OUT/admission_suite.txt"
}
do_families() {
  local models=${ZOO_MODELS:-efficientvit_b1 mobilenetv2_050 mobilenetv3_large_100 efficientnet_b0 convnext_atto repvit_m0_9 fastvit_t8 edgenext_xx_small}
  timeout ${FAMILIES_TIMEOUT:-500} python3 benchmarks/zoo.py --models "${models// /,}" --engine torch --arch "$ARCH" \
    --size "${ZOO_SIZE:-4x1088x1920}" --stop-after propose --timeout 300 --workdir "$PWD/runs/families" --families \
    > "$OUT/families.txt" 2> "$OUT/families.log"
  echo "families rc=$?"
  cp runs/families/zoo_report.json "$OUT/families.json" 2>/dev/null
  sed -n '/where the time goes/,$p' "$OUT/families.txt" | cut -c1-200 | head -60
  rm -rf runs/families/*/base
}
do_zootable() {  # the tables again, for models whose autoloop ran earlier on this (still warm) machine
  for m in ${ZOO_MODELS:?name the corpus models}; do zoo_table "$m"; done
}
do_carve() {
  # a full-size carve of CARVE_MODEL (a model.py, e.g. contrib/zoo/efficientvit_m0.py) with the selectors in
  # CARVE_PLUGINS (separated by ';') into runs/rt/<model>, which a later `regions` word tables
  local m=${CARVE_MODEL:?name a model.py} sel=() args=()
  local name; name=$(basename "$m" .py)
  local d=runs/rt/$name
  IFS=';' read -ra sel <<< "${CARVE_PLUGINS:?name the selectors to carve, separated by ;}"
  for s in "${sel[@]}"; do args+=(--plugin "$s"); done
  rm -rf "$d" && mkdir -p "$d"
  (cd "$d" && YTK_EXAMPLE_SIZE=${ZOO_SIZE:-4x1088x1920} timeout ${CARVE_TIMEOUT:-300} ytk embedded prepare \
    "$OLDPWD/$m" --onnx-out model.onnx --npz-out model.npz --reference-out model.reference.npz "${args[@]}" \
    > "$OUT/carve_$name.log" 2>&1)
  echo "carve $name rc=$?"; tail -3 "$OUT/carve_$name.log"
  export REGIONS_DIRS="${REGIONS_DIRS:-} $d"
}
do_regions() {
  # REGIONS_DIRS: carve directories to table instead (e.g. carved at full size on a CPU host and carried)
  local dirs=()
  if [ -n "${REGIONS_DIRS:-}" ]; then dirs=($REGIONS_DIRS)
  else for m in ${ZOO_MODELS:?name the corpus models or REGIONS_DIRS}; do dirs+=("runs/zoo/$m/round1/prepare"); done; fi
  for d in "${dirs[@]}"; do
    m=$(echo "$d" | tr '/' '_')
    timeout ${REGIONS_TIMEOUT:-500} python3 benchmarks/region_table.py "$PWD/$d" ${REGIONS_ONLY:+--only "$REGIONS_ONLY"} \
      --json "$OUT/regions_$m.json" > "$OUT/regions_$m.txt" 2> "$OUT/regions_$m.log"
    echo "$d regions rc=$?"; cat "$OUT/regions_$m.txt"
  done
}
serve() {  # serve NAME URL_PATH TOKEN_VAR CMD...: start a service in the background on loopback, wait until URL_PATH
  # answers with the token, and leave its pid in SERVED (its log: $OUT/NAME_service.log)
  local name=$1 path=$2 tokvar=$3; shift 3
  "$@" > "$OUT/${name}_service.log" 2>&1 &
  SERVED=$!
  URL_PATH=$path TOKEN=${!tokvar} python3 - <<'PY' && return 0
import os, time, urllib.request
req = urllib.request.Request("http://127.0.0.1:" + os.environ["URL_PATH"], headers={"Authorization": "Bearer " + os.environ["TOKEN"]})
for _ in range(90):
    try:
        urllib.request.urlopen(req, timeout=2).read()
        break
    except OSError:
        time.sleep(1)
else:
    raise SystemExit(1)
PY
  echo "$name service did not come up"; tail "$OUT/${name}_service.log"; kill $SERVED; return 1
}
remote_autoloop() {  # remote_autoloop NAME [extra autoloop args]: `autoloop`'s run into runs/autoloop-NAME, then both results
  local name=$1 t0; shift
  rm -rf "runs/autoloop-$name"
  t0=$(date +%s)
  timeout ${REMOTE_TIMEOUT:-420} ytk autoloop "${REMOTE_MODEL:-contrib/models/efficientvit_b1/model.py}" -a "$ARCH" -p fp16 \
    --workdir "runs/autoloop-$name" --max-rounds "${ROUNDS:-2}" --min-gain-ms "${MIN_GAIN:-0.1}" --json "$@" \
    > "$OUT/autoloop_$name.json" 2> "$OUT/autoloop_$name.stderr"
  echo "$name autoloop rc=$? in $(( $(date +%s) - t0 )) s"
  cp "runs/autoloop-$name/report/autoloop_report.md" "$OUT/autoloop_${name}_report.md" 2>/dev/null
  for r in runs/autoloop/report/autoloop_report.md "runs/autoloop-$name/report/autoloop_report.md"; do
    echo "== $r"; grep -m1 '^\*\*' "$r" 2>/dev/null; grep -m1 '^- wall time' "$r" 2>/dev/null
    sed -n '/^## Time per stage/,/^## /p' "$r" 2>/dev/null | grep '^|'
  done
}
start_gaia() {  # a Gaia service on loopback with a fresh key and state (its templates generator and nvcc builder)
  export YTK_GAIA_API_KEY=$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))') YTK_GAIA_URL=http://127.0.0.1:8471
  rm -rf runs/gaia-state
  serve gaia 8471/v1/info YTK_GAIA_API_KEY ytk worker gaia --port 8471 --state-dir runs/gaia-state
}
start_kronos() {  # a Kronos worker (torch engine) on loopback with a fresh token and state
  export YTK_KRONOS_TOKEN=$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')
  rm -rf runs/kronos-state
  serve kronos 8470/v1/jobs YTK_KRONOS_TOKEN ytk worker kronos --engine torch --host 127.0.0.1 --port 8470 \
    --state-dir runs/kronos-state
}
do_gaia() {
  # issue 25: `autoloop`'s run through a Gaia service on loopback; compare with runs/autoloop (the `autoloop` word,
  # earlier on this machine)
  start_gaia || return
  YTK_KERNELGEN=gaia YTK_BUILDER=gaia remote_autoloop gaia
  kill $SERVED; wait $SERVED 2>/dev/null
}
do_kronos() {
  # issue 24: `autoloop`'s run with every compile on a Kronos worker on loopback; compare as gaia does
  start_kronos || return
  remote_autoloop kronos --worker http://127.0.0.1:8470
  kill $SERVED; wait $SERVED 2>/dev/null
}
do_both() {
  # issues 24 and 25 in one run: kernels generated and plugins built by the Gaia service, every engine compiled on
  # the Kronos worker; each report's time per stage says what each service added
  start_gaia || return
  local gaia=$SERVED
  start_kronos || { kill $gaia; return; }
  YTK_KERNELGEN=gaia YTK_BUILDER=gaia remote_autoloop both --worker http://127.0.0.1:8470
  kill $SERVED $gaia; wait $SERVED $gaia 2>/dev/null
}
do_cachepack() {
  # the machine's nvcc build cache (every variant compiled here) back in $OUT as parts of at most 15 MiB, for the next
  # session to carry as .kcache (mkdir -p .kcache && cp <files_at>/nvcc.tar.xz.part-* .kcache/): a fresh machine then
  # scores instead of compiling the same families again
  [ -d /tmp/kcache/nvcc ] || { echo "cachepack: no build cache here"; return; }
  tar -cJf /tmp/nvcc.tar.xz -C /tmp/kcache nvcc
  local size; size=$(stat -c %s /tmp/nvcc.tar.xz)
  if [ "$size" -gt $((45 * 1024 * 1024)) ]; then echo "cachepack: $((size >> 20)) MiB compressed, over what a call carries"
  else split -b 15M -a 2 /tmp/nvcc.tar.xz "$OUT/nvcc.tar.xz.part-"; echo "cachepack: $((size >> 20)) MiB in $(ls "$OUT"/nvcc.tar.xz.part-* | wc -l) part(s)"; fi
  rm -f /tmp/nvcc.tar.xz
}
for w in "${words[@]}"; do
  case $w in
    flow|table|gputests|pytest|autoloop|zoo|zootable|families|admission|carve|regions|gaia|kronos|both|cachepack) "do_$w" ;;
    *) echo "unknown word $w (flow, table, gputests, pytest, autoloop, zoo, zootable, families, admission, carve, regions, gaia,"\
         "kronos, both, cachepack)"; exit 2 ;;
  esac
done
