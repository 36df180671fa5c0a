#!/usr/bin/env bash
# Symmetric memory (goccl.Window) beside its ceilings, in one run on this
# machine: examples/symm-producer over shared memory and over soft RoCE
# (GOCCL_NET=roce GOCCL_SHM_DISABLE=1), each with two-sided Send/Recv of the
# same blocks beside it, and the soft RoCE device's own ib_write_lat
# (`goccl roce write-lat`, one 8-byte to 1 MiB WRITE ping-pong per
# iteration, no signal) for the latency a put over RoCE cannot beat.
#
# Usage: scripts/symm-bench.sh [ITERS (2000)]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
ITERS=${1:-2000}
out=$(mktemp -d /tmp/symm-bench.XXXXXX)
trap 'rm -rf "$out"' EXIT
go build -o "$out/goccl" ./cmd/goccl
go build -o "$out/symm-producer" ./examples/symm-producer
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs, $(go version | cut -d' ' -f3), 2 ranks"
for net in shm roce; do
  echo "## symm-producer over $net"
  env_vars=()
  [ "$net" = roce ] && env_vars=(GOCCL_NET=roce GOCCL_SHM_DISABLE=1)
  env "${env_vars[@]}" "$out/goccl" run -np 2 "$out/symm-producer" -n "$ITERS" -stream "$ITERS" \
    -sizes 8,4K,64K,1M | sed 's/^\[0\] //'
done
echo "## goccl roce write-lat (ib_write_lat: µs, half the round trip)"
port=18700
for size in 8 4096 65536 1048576; do
  "$out/goccl" roce write-lat -s $size -n "$ITERS" -p $port >/dev/null 2>&1 &
  sleep 0.3
  "$out/goccl" roce write-lat -s $size -n "$ITERS" -p $port 127.0.0.1 | grep -E '^ +[0-9]'
  wait
  port=$((port + 1))
done
