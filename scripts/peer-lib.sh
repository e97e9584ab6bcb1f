# Sourced by the scripts that drive the reference engines (compare-llamacpp.sh, peer-logits.sh).
# peer_compile NAME SOURCE-DIR LIB-DIR-OVERRIDE EXTRA-FLAGS OUT-DIR: compiles scripts/peer-decode.cc
# against one engine's libllama into OUT-DIR/peer-NAME (and its library directory into
# OUT-DIR/lib-NAME); says why on stderr and returns 1 when it cannot.
peer_compile() {
  local name=$1 dir=$2 lib=$3 extra=$4 out=$5
  if [[ -z $lib ]]; then
    lib=$(find "$dir/build" -name libllama.so -print -quit 2>/dev/null || true)
    [[ -n $lib ]] || { echo "$name: no libllama.so under $dir/build" >&2; return 1; }
    lib=$(dirname "$lib")
  fi
  c++ -O2 -std=c++17 $extra scripts/peer-decode.cc -I"$dir/include" -I"$dir/ggml/include" \
    -L"$lib" -lllama -Wl,-rpath,"$lib" -o "$out/peer-$name" 2>"$out/cc-$name.log" || {
    echo "$name: cannot compile scripts/peer-decode.cc against $dir (see below)" >&2
    cat "$out/cc-$name.log" >&2
    return 1
  }
  echo "$lib" >"$out/lib-$name"
}
