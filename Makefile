# Thin wrapper over the CMake presets. `make demo` and `make test` work on a fresh machine:
# each first installs the Debian packages the project needs (scripts/install-deps.sh).
JOBS ?= $(shell nproc)
.PHONY: deps build debug asan fuzz demo test format clean

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

fuzz: deps
	cmake --preset fuzz >/dev/null
	cmake --build --preset fuzz -j $(JOBS)

demo: build
	bash scripts/demo.sh

# The fuzzer and the ASan+UBSan pass of the whole suite (server soak included) run first, so
# the release test runner's summary is the last thing printed.
test: build
	$(MAKE) fuzz
	bash scripts/run-fuzz.sh 60
	$(MAKE) asan
	ctest --preset asan -j $(JOBS) -E e2e
	ctest --preset release -j $(JOBS)

format:
	clang-format -i $$(git ls-files '*.h' '*.cc')

clean:
	rm -rf build
