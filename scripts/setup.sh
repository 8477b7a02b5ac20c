#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Idempotent setup: Debian packages from deps/apt-packages.txt (only the missing ones), a .venv with
# deps/python-requirements.txt and fabscope, and the engine built and installed into .venv/bin.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' deps/apt-packages.txt | tr -s ' \n' ' ')
missing=()
for p in $packages; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: installing packages needs root (apt-get); run as root or install them yourself" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.requirements-stamp
if [ ! -f "$stamp" ] || ! cmp -s deps/python-requirements.txt "$stamp"; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -r deps/python-requirements.txt
  cp deps/python-requirements.txt "$stamp"
fi
# Editable: the checkout is the install, so testbed guests and tests see the same code.
.venv/bin/pip install -q --no-deps --no-build-isolation -e . 2>/dev/null || .venv/bin/pip install -q --no-deps -e .

cmake -S engine -B build/engine -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build/engine >/dev/null
cmake --install build/engine --prefix .venv >/dev/null
echo "setup: ok ($(.venv/bin/fabscope --version); engine backends: $(.venv/bin/fabscope-engine --list-backends | awk '{print $1}' | paste -sd, -))"
