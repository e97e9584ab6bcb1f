# Thin wrapper over the CMake presets. `make demo` and `make test` work on a fresh machine:
# each first installs the Debian packages the project needs (scripts/install-deps.sh).
JOBS ?= $(shell nproc)
.PHONY: deps build debug asan demo test format clean

deps:
	bash scripts/install-deps.sh

build: deps
	cmake --preset release >/dev/null
	cmake --build --preset release -j $(JOBS)

debug: deps
	cmake --preset debug >/dev/null
	cmake --build --preset debug -j $(JOBS)

asan: deps
	cmake --preset asan >/dev/null
	cmake --build --preset asan -j $(JOBS)

demo: build
	bash scripts/demo.sh

# The ASan+UBSan build (clang) holds the fuzzers too. The fuzzers and the sanitized pass of
# the whole suite (server soak included) run first, so the release test runner's summary is
# the last thing printed; each phase prints the time it starts, for CI's budget.
test: build
	@echo "== $$(date -u +%T) release build done; ASan+UBSan build"
	$(MAKE) asan
	@echo "== $$(date -u +%T) fuzzers"
	bash scripts/run-fuzz.sh 60
	@echo "== $$(date -u +%T) ASan+UBSan suite"
	ctest --preset asan -j $(JOBS) -E e2e
	@echo "== $$(date -u +%T) release suite"
	ctest --preset release -j $(JOBS)
	@echo "== $$(date -u +%T) done"

format:
	clang-format -i $$(git ls-files '*.h' '*.cc')

clean:
	rm -rf build
