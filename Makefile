# The two commands of the README:
#   make run    set up, then the loopback suite (every built backend and pattern) with its report
#   make test   set up, then every test (unit, engine C tests, sanitizers, fuzz smoke, integration,
#               netns, Soft-RoCE guest)
.PHONY: setup run test test-fast lint engine-asan fuzz clean

setup:
	bash scripts/setup.sh

run: setup
	.venv/bin/fabscope suite --out build/report

test: setup
	bash scripts/test.sh

# Without the slow stages (sanitizer build, fuzzing, Soft-RoCE guest): for quick iteration.
test-fast: setup
	FABSCOPE_FAST=1 bash scripts/test.sh

lint: setup
	.venv/bin/ruff check python tests bench
	.venv/bin/mypy

clean:
	rm -rf build .venv
