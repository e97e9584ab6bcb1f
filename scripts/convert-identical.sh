#!/bin/bash
# Converts every test checkpoint (tests/reference/make_hf_checkpoint.py --out DIR) with two
# lynx-moe binaries, as they are, with --type q8_0 and (DeepSeek) --mla-split, and compares the
# GGUF files (or the errors) byte for byte: a refactor of convert must leave them identical.
# usage: scripts/convert-identical.sh OLD_BINARY NEW_BINARY CHECKPOINTS_DIR
set -u
old=$1 new=$2 fx=$3 out=$(mktemp -d) n=0 bad=0
for d in "$fx"/*/; do
  name=$(basename "$d")
  for extra in "" "--mla-split" "--type q8_0"; do
    [[ "$extra" == "--mla-split" && "$name" != deepseek* ]] && continue
    tag="$name${extra// /}"
    "$old" convert -q $extra -o "$out/old.gguf" "$d" >"$out/old.log" 2>&1; r1=$?
    "$new" convert -q $extra -o "$out/new.gguf" "$d" >"$out/new.log" 2>&1; r2=$?
    n=$((n+1))
    if [[ $r1 != $r2 ]]; then echo "DIFF rc $tag $r1 $r2"; bad=$((bad+1)); continue; fi
    if [[ $r1 != 0 ]]; then cmp -s "$out/old.log" "$out/new.log" || { echo "DIFF err $tag"; bad=$((bad+1)); }; continue; fi
    cmp "$out/old.gguf" "$out/new.gguf" || { echo "DIFF $tag"; bad=$((bad+1)); }
  done
done
echo "$n conversions, $bad differ"
rm -rf "$out"
[[ $bad == 0 ]]
