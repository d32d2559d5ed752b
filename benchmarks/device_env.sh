# Sourced (not run) by the device scripts, from the repo root: the wheels the device image lacks
# (.whl, staged by ../shared/device/stage-wheels.sh) into /tmp/site on PYTHONPATH, and the nvcc build
# cache (.kcache/nvcc.tar.xz, made by `kernels_templates.py --prebuild` on a CPU host) unpacked once
# into /tmp/kcache (a machine that is still warm keeps it) and named by YTK_TEMPLATES_CACHE.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || return 1
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# (or the parts of one a device run's `cachepack` word brought back: .kcache/nvcc.tar.xz.part-*)
if [ ! -d /tmp/kcache/nvcc ]; then
  if [ -f .kcache/nvcc.tar.xz ]; then mkdir -p /tmp/kcache && tar -xJf .kcache/nvcc.tar.xz -C /tmp/kcache
  elif compgen -G ".kcache/nvcc.tar.xz.part-*" > /dev/null; then
    mkdir -p /tmp/kcache && cat .kcache/nvcc.tar.xz.part-* | tar -xJ -C /tmp/kcache
  fi
fi
if [ -d /tmp/kcache/nvcc ]; then export YTK_TEMPLATES_CACHE=/tmp/kcache/nvcc; fi
