# SPDX-License-Identifier: BSD-3-Clause
# The two commands of the README:
#   make run    set up, then the loopback suite (every built backend and pattern) with its report
#   make test   set up, then every test (unit, engine C tests, sanitizers, fuzz smoke, integration,
#               netns, Soft-RoCE guest)
.PHONY: setup run test test-fast lint bench bench-instr deb clean

setup:
	bash scripts/setup.sh

run: setup
	.venv/bin/fabscope suite --out build/report; rc=$$?; \
	.venv/bin/fabscope report build/report/loopback.jsonl --title "fabscope loopback suite" \
		--html build/report/report.html && exit $$rc

test: setup
	bash scripts/test.sh

# Without the slow stages (sanitizer build, fuzzing, Soft-RoCE guest): for quick iteration.
test-fast: setup
	FABSCOPE_FAST=1 bash scripts/test.sh

lint: setup
	.venv/bin/ruff check python tests bench
	.venv/bin/mypy

# Every bench of bench/ (side-by-side runs against the peer tools, the matrix's simulations and
# timing, the exporter's scrape, the Soft-RoCE comparisons), or why one is skipped: bench/run_all.py.
# Not a test: a bench's verdicts never fail it.
bench: setup
	.venv/bin/python bench/run_all.py

# Work per message and per empty poll turn, counted in instructions (callgrind), fabscope against
# the same peers: the table bench/RESULTS.md carries ("Work per message, counted"). ~30 min.
bench-instr: setup
	.venv/bin/python bench/instr.py --json build/instr.json

# The Debian package for sites: build/deb/fabscope_VERSION_ARCH.deb (built in a copy under build/deb,
# checked by lintian). Its install on a clean Debian root is tests/packaging/test_deb.py.
deb: setup
	bash scripts/build-deb.sh

clean:
	rm -rf build .venv
