#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Every test, in order of cost. Fails on the first failing stage and says which.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
# fabscope is an editable install: where no bytecode may be written, every `fabscope` a test starts
# compiles its modules again (~50 ms a command here, ~0.5 s in a TCG guest, which has its own cache).
# Bytecode goes to build/, never beside the sources.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="$PWD/build/pycache"
stage() { echo; echo "=== $* === (at ${SECONDS} s)"; }

# The stage plan. A test with a wall-clock bound (test_loop.c's, the integration and guest tests, a unit
# test marked `measures`) loses it on a machine that something else of this run keeps busy; so:
#   1. lint, then the C tests (test_loop.c's wall-clock bounds): alone.
#   2. the soak of serve, in the background, beside what times nothing: the ASan/UBSan build, both
#      fuzzers, the guest image's check, the .deb and the unit and property tests four at once (none
#      marked `measures`). The soak's own deadlines then share the CPUs with compilers: harder to pass.
#   3. once the soak ended: the C tests and a loopback run under the sanitizers, alone.
#   4. packaging and single-guest tests that time nothing (marked two_at_once), two at once.
#   5. everything else, one at a time: integration, netns, Soft-RoCE guests, browser, `measures`.
#   6. every skip of every stage against tests/expected-skips.txt (scripts/check_skips.py).
reports=build/test-reports
rm -rf "$reports"; mkdir -p "$reports"

stage "lint: ruff + mypy"
ruff check python tests bench scripts/check_skips.py
mypy

stage "engine: C unit tests"
ctest --test-dir build/engine --output-on-failure --output-junit "$PWD/$reports/ctest.xml"

soak_pid=""
if [ -z "${FABSCOPE_FAST:-}" ]; then
  stage "python: soak of fabscope serve (honest runs among hostile connections, 2.5 min), in the background"
  # its own process group, so that a stage failing meanwhile stops it with everything it started
  FABSCOPE_SOAK_SECONDS="${FABSCOPE_SOAK_SECONDS:-150}" setsid python -m pytest -q -p no:cacheprovider -s -m soak \
    --junitxml="$reports/soak.xml" tests/integration/test_serve_soak.py > build/soak.log 2>&1 &
  soak_pid=$!
  trap '[ -n "$soak_pid" ] && kill -- "-$soak_pid" 2>/dev/null; true' EXIT

  stage "engine: ASan/UBSan build (its tests run once the soak ended)"
  cmake -S engine -B build/engine-asan -G Ninja -DFS_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
  ninja -C build/engine-asan >/dev/null

  # The two fuzzers at once, each on a CPU of its own (each is one process): 30 s instead of 60.
  stage "fuzzing, both at once for 30 s: libFuzzer on the engine's control-message parser, atheris on serve's control path"
  CC=clang cmake -S engine -B build/engine-fuzz -G Ninja -DFS_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
  ninja -C build/engine-fuzz fuzz_ctl >/dev/null
  mkdir -p build/fuzz-corpus build/fuzz-py-corpus
  cp engine/fuzz/corpus/* build/fuzz-corpus/
  build/engine-fuzz/fuzz_ctl -max_total_time=30 -max_len=4096 build/fuzz-corpus > build/fuzz-c.log 2>&1 &
  fuzz_c=$!
  python tests/fuzz/fuzz_control.py -max_total_time=30 -max_len=4096 build/fuzz-py-corpus tests/fuzz/corpus \
    > build/fuzz-py.log 2>&1 &
  fuzz_py=$!
  rc_c=0; wait "$fuzz_c" || rc_c=$?
  rc_py=0; wait "$fuzz_py" || rc_py=$?
  # A failing fuzzer's log shows its crash and the input that caused it: 40 lines of it, 3 otherwise.
  echo "libFuzzer (engine, exit $rc_c):"; tail -n "$([ "$rc_c" -eq 0 ] && echo 3 || echo 40)" build/fuzz-c.log
  echo "atheris (serve, exit $rc_py):"; tail -n "$([ "$rc_py" -eq 0 ] && echo 3 || echo 40)" build/fuzz-py.log
  [ "$rc_c" -eq 0 ] && [ "$rc_py" -eq 0 ] || { echo "a fuzzer failed (exit $rc_c, $rc_py)"; exit 1; }
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

# `unreliable`: a test the product fails now and then, for a cause written at its mark (and open in
# an issue): out of the run until the cause is fixed, never loosened to pass. `pytest -m unreliable`.
markers="not soak and not unreliable"
[ -n "${FABSCOPE_FAST:-}" ] && markers="not softroce and not soak and not packaging and not unreliable"
# Unit and property tests (marked `parallel` by tests/conftest.py) use no network, and half their time
# is waiting (subprocess deadlines): four at once, beside the soak. A unit test whose assertions depend
# on timing real runs or hold a wall-clock bound (marked `measures`) runs in the last stage, alone.
stage "python: unit and property tests (four workers)"
python -m pytest -q -p no:cacheprovider -n 4 --durations=10 -m "$markers and parallel and not measures" \
  --junitxml="$reports/unit.xml" tests/unit tests/property
if [ -n "$soak_pid" ]; then
  stage "python: waiting for the soak of fabscope serve to end"
  rc_soak=0; wait "$soak_pid" || rc_soak=$?
  soak_pid=""
  tail -n "$([ "$rc_soak" -eq 0 ] && echo 4 || echo 80)" build/soak.log
  [ "$rc_soak" -eq 0 ] || { echo "the soak of fabscope serve failed (exit $rc_soak): build/soak.log"; exit 1; }
fi

if [ -z "${FABSCOPE_FAST:-}" ]; then
  stage "engine: C tests and a loopback run under ASan/UBSan (alone: test_loop.c's wall-clock bounds)"
  ctest --test-dir build/engine-asan --output-on-failure --output-junit "$PWD/$reports/ctest-asan.xml"
  FABSCOPE_ENGINE="$PWD/build/engine-asan/fabscope-engine" \
    python -m pytest -q -p no:cacheprovider --junitxml="$reports/asan-loopback.xml" \
    tests/integration/test_tcp_loopback.py -k "sanity"

  # Packaging (compilers, dpkg) and the single-guest tests that time nothing (marked two_at_once):
  # a guest on one vCPU, or one waiting out its deadline, leaves a CPU idle, so two at once. The
  # xdist_group marks pair them: the guests on one worker, the builds and the idle deadline on the other.
  stage "python: packaging and single-guest tests that time nothing (two workers)"
  python -m pytest -q -p no:cacheprovider -n 2 --dist loadgroup --durations=10 -m "$markers and two_at_once" \
    --junitxml="$reports/two-at-once.xml" tests
fi
stage "python: integration, netns, Soft-RoCE guest and browser tests, and unit tests that time real runs (one at a time)"
python -m pytest -q -p no:cacheprovider --durations=60 -m "$markers and (measures or not parallel) and not two_at_once" \
  --junitxml="$reports/one-at-a-time.xml" tests

stage "skips: each one expected on this machine (tests/expected-skips.txt)"
python scripts/check_skips.py tests/expected-skips.txt "$reports"/*.xml

echo; echo "=== every stage passed (${SECONDS} s) ==="
