#!/usr/bin/env bash
# expect_fail.sh SECONDS PATTERN COMMAND...: passes when COMMAND exits non-zero within SECONDS
# (a hang fails) and, if PATTERN is not empty, its stderr matches PATTERN (grep -E).
set -uo pipefail
limit=$1
pattern=$2
shift 2
err=$(mktemp)
trap 'rm -f "$err"' EXIT
start=$SECONDS
timeout --kill-after=10 "$limit" "$@" 2>"$err" >/dev/null
rc=$?
elapsed=$((SECONDS - start))
cat "$err" >&2
if ((rc == 0)); then
  echo "expect_fail: the command succeeded" >&2
  exit 1
fi
# 124 is timeout's; 137 (SIGKILL) is also what mpirun returns for a rank killed by signal 9,
# so the clock decides.
if ((rc == 124 || elapsed >= limit)); then
  echo "expect_fail: the command did not end within ${limit}s" >&2
  exit 1
fi
if [[ -n "$pattern" ]] && ! grep -Eq "$pattern" "$err"; then
  echo "expect_fail: stderr does not match '$pattern'" >&2
  exit 1
fi
echo "expect_fail: exit status $rc as expected" >&2
