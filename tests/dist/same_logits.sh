#!/usr/bin/env bash
# same_logits.sh [--stderr REGEX] LYNX_MOE MODEL EP_COMMAND...: the logits of every position
# that EP_COMMAND (an expert-parallel `lynx-moe logits` without -m/--out/--all) writes for
# MODEL must be byte-identical to those of one process (every expert loaded); with --stderr,
# EP_COMMAND's standard error must also match REGEX (grep -E).
set -euo pipefail
want=""
if [ "$1" = "--stderr" ]; then
  want=$2
  shift 2
fi
bin=$1
model=$2
shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$bin" logits -m "$model" --expert-cache 0 --tokens 1,2,3,4,5,6,7,8 --all --out "$dir/one.f32" \
  >/dev/null
"$@" -m "$model" --tokens 1,2,3,4,5,6,7,8 --all --out "$dir/ep.f32" >/dev/null 2>"$dir/ep.err" ||
  { cat "$dir/ep.err" >&2; exit 1; }
cat "$dir/ep.err" >&2
if [ -n "$want" ] && ! grep -Eq "$want" "$dir/ep.err"; then
  echo "same_logits: standard error does not match '$want'" >&2
  exit 1
fi
cmp "$dir/one.f32" "$dir/ep.f32"
echo "same_logits: $(stat -c %s "$dir/one.f32") bytes identical"
