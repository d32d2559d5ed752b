#!/usr/bin/env bash
# On a CPU host with an index, from the repo root: put timm at the release requirements/zoo.txt pins into .whl/,
# so the GPU machine builds the zoo's models with the timm the corpus was built and measured with (its image
# carries another release, whose efficientvit_m0 refuses a non-square input). device_env.sh installs everything
# in .whl/ ahead of the image's packages; carry ".whl".
set -eu
mkdir -p .whl
pin=$(grep -i "^timm==" requirements/zoo.txt) || { echo "no timm pin in requirements/zoo.txt" >&2; exit 1; }
python3 -m pip download -q --no-deps -d .whl "$pin"
ls .whl
