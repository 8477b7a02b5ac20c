#!/usr/bin/env bash
# Every test, in order of cost. Fails on the first failing stage and says which.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
stage() { echo; echo "=== $* === (at ${SECONDS} s)"; }

stage "lint: ruff + mypy"
ruff check python tests bench
mypy

stage "engine: C unit tests"
ctest --test-dir build/engine --output-on-failure

if [ -z "${FABSCOPE_FAST:-}" ]; then
  stage "engine: ASan/UBSan build, C tests and a loopback run under the sanitizers"
  cmake -S engine -B build/engine-asan -G Ninja -DFS_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
  ninja -C build/engine-asan >/dev/null
  ctest --test-dir build/engine-asan --output-on-failure
  FABSCOPE_ENGINE="$PWD/build/engine-asan/fabscope-engine" \
    python -m pytest -q -p no:cacheprovider tests/integration/test_tcp_loopback.py -k "sanity"

  stage "engine: libFuzzer on the control-message parser (30 s)"
  CC=clang cmake -S engine -B build/engine-fuzz -G Ninja -DFS_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
  ninja -C build/engine-fuzz fuzz_ctl >/dev/null
  mkdir -p build/fuzz-corpus
  cp engine/fuzz/corpus/* build/fuzz-corpus/
  build/engine-fuzz/fuzz_ctl -max_total_time=30 -max_len=4096 build/fuzz-corpus 2>&1 | tail -3

  stage "python: atheris on fabscope serve's control path (30 s)"
  mkdir -p build/fuzz-py-corpus
  python tests/fuzz/fuzz_control.py -max_total_time=30 -max_len=4096 build/fuzz-py-corpus tests/fuzz/corpus 2>&1 | tail -3
fi

if [ -z "${FABSCOPE_FAST:-}" ]; then
  stage "testbed: Soft-RoCE guest image (cached under \${FABSCOPE_CACHE:-/var/cache/fabscope})"
  python -m fabscope.testbed.softroce build --siw
fi

if [ -z "${FABSCOPE_FAST:-}" ]; then
  stage "packaging: make deb (lintian: no error or warning; kept when its inputs did not change); tests/packaging installs it"
  bash scripts/build-deb.sh
  FABSCOPE_DEB=$(ls build/deb/fabscope_*_"$(dpkg --print-architecture)".deb)
  export FABSCOPE_DEB
fi

stage "python: unit and integration tests"
markers="not soak"
[ -n "${FABSCOPE_FAST:-}" ] && markers="not softroce and not soak and not packaging"
python -m pytest -q -p no:cacheprovider --durations=60 ${markers:+-m "$markers"} tests

if [ -z "${FABSCOPE_FAST:-}" ]; then
  stage "python: soak of fabscope serve (honest runs among hostile connections, ~3 min)"
  python -m pytest -q -p no:cacheprovider -s -m soak tests/integration/test_serve_soak.py
fi
echo; echo "=== every stage passed (${SECONDS} s) ==="
