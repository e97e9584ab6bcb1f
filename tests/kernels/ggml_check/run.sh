#!/usr/bin/env bash
# Checks lynx-moe's decoders and quantizers against ggml's own, compiled from a ggml source
# tree (not part of the test suite: it needs ggml's source, which this repository does not
# carry). Usage, after `cmake --build --preset release --target lynx_kernels`:
#   tests/kernels/ggml_check/run.sh /path/to/ggml    # a checkout of ggml-org/ggml (or llama.cpp/ggml)
# Prints, per type, how many blocks our quantizer writes differently from ggml's (the functions
# llama-quantize calls without an importance matrix) and how many decoded values differ (on
# quantized rows and on random bytes); exits non-zero if any does.
set -euo pipefail
GGML=${1:?usage: run.sh GGML_SOURCE_DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
B=$ROOT/build/release
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cat > "$T/stubs.c" <<'C'
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
void ggml_abort(const char* file, int line, const char* fmt, ...) { fprintf(stderr, "ggml abort %s:%d\n", file, line); abort(); }
void ggml_log_internal(int level, const char* format, ...) { (void)level; (void)format; }
size_t ggml_row_size(int type, int64_t ne) { (void)type; (void)ne; return 0; }
const char* ggml_type_name(int type) { (void)type; return "?"; }
size_t ggml_type_size(int type) { (void)type; return 0; }
C
gcc -O2 -std=c11 -c -I "$GGML/include" -I "$GGML/src" "$GGML/src/ggml-quants.c" -o "$T/quants.o"
gcc -O2 -c "$T/stubs.c" -o "$T/stubs.o"
g++ -O2 -std=c++20 -I "$ROOT/include" -I "$ROOT/src" "$HERE/check_types_vs_ggml.cc" "$T/quants.o" \
  "$T/stubs.o" "$B/src/kernels/liblynx_kernels.a" "$B/src/gguf/liblynx_gguf.a" \
  $(pkg-config --libs libhwy) -lpthread -o "$T/check"
"$T/check"
