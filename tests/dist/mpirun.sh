#!/usr/bin/env bash
# mpirun.sh MPIRUN NP COMMAND...: COMMAND on NP ranks of this machine, oversubscribed (more
# ranks than cores is fine for tests), over shared memory.
set -euo pipefail
mpirun=$1
np=$2
shift 2
exec "$mpirun" --oversubscribe --bind-to none -np "$np" "$@"
