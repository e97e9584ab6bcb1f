#!/usr/bin/env bash
# same_text.sh LYNX_MOE MODEL EP_PREFIX...: `generate` (greedy, two sequences, topk and lynx)
# must write the same texts as one process when run as EP_PREFIX lynx-moe generate ...
set -euo pipefail
bin=$1
model=$2
shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
args=(generate -m "$model" -p "Once upon a time" -n 12 --parallel 2 -t 1 --routing "topk;lynx")
"$bin" "${args[@]}" | grep -E '^(\[|===)' >"$dir/one.txt"
"$@" "$bin" "${args[@]}" --expert-parallel --ep-combine gather | grep -E '^(\[|===)' >"$dir/ep.txt"
diff "$dir/one.txt" "$dir/ep.txt"
echo "same_text: $(wc -l <"$dir/one.txt") lines identical"
