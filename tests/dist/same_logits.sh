#!/usr/bin/env bash
# same_logits.sh LYNX_MOE MODEL EP_COMMAND...: the logits of every position that EP_COMMAND
# (an expert-parallel `lynx-moe logits` without -m/--out/--all) writes for MODEL must be
# byte-identical to those of one process.
set -euo pipefail
bin=$1
model=$2
shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$bin" logits -m "$model" --tokens 1,2,3,4,5,6,7,8 --all --out "$dir/one.f32" >/dev/null
"$@" -m "$model" --tokens 1,2,3,4,5,6,7,8 --all --out "$dir/ep.f32" >/dev/null
cmp "$dir/one.f32" "$dir/ep.f32"
echo "same_logits: $(stat -c %s "$dir/one.f32") bytes identical"
