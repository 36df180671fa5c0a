#!/usr/bin/env bash
# The RoCE transport's AllReduce beside the soft RoCE device's own ceiling,
# in one run on this machine: `goccl roce write-bw` (perftest's ib_write_bw:
# one QP, one direction) at 1, 8 and 64 MiB, the same with -b (both
# directions at once, what a 2-rank AllReduce does), then `goccl perf all_reduce`
# and all_gather on NP ranks (default 2) with every link over RoCE
# (GOCCL_NET=roce GOCCL_SHM_DISABLE=1), unregistered (-R 0) and registered
# (-R 1), then over TCP (GOCCL_NET=socket) for comparison.
# write-bw prints MB = 2^20 bytes; goccl perf prints GB = 1e9 bytes.
#
# Usage: scripts/roce-bench.sh [NP (2)] [ITERS (20)]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
NP=${1:-2} ITERS=${2:-20}
out=$(mktemp -d /tmp/roce-bench.XXXXXX)
trap 'rm -rf "$out"' EXIT
go build -o "$out/goccl" ./cmd/goccl
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs, $(go version | cut -d' ' -f3), $NP ranks"
echo "## goccl roce write-bw (one QP, one way; MB/sec = 2^20 bytes/s)"
port=18600
for size in 1M 8M 64M; do
  n=$((512 * 1024 * 1024 / $(numfmt --from=iec $size)))
  "$out/goccl" roce write-bw -s $size -n $n -p $port >/dev/null 2>&1 &
  sleep 0.3
  "$out/goccl" roce write-bw -s $size -n $n -p $port 127.0.0.1 | grep -E '^ +[0-9]'
  wait
  port=$((port + 1))
done
echo "## goccl roce write-bw -b (both directions at once, as ib_write_bw -b: the sum; MB/sec = 2^20 bytes/s)"
for size in 1M 8M 64M; do
  n=$((512 * 1024 * 1024 / $(numfmt --from=iec $size)))
  "$out/goccl" roce write-bw -b -s $size -n $n -p $port >/dev/null 2>&1 &
  sleep 0.3
  "$out/goccl" roce write-bw -b -s $size -n $n -p $port 127.0.0.1 | grep -E '^ +[0-9]'
  wait
  port=$((port + 1))
done
# RoCE with unregistered buffers (staged through the links' slots), then
# registered ones (goccl perf -R 1: sends go straight from the buffer and,
# for receives that do not reduce, straight into it), then TCP.
for run in "roce 0" "roce 1" "socket 0"; do
  set -- $run
  net=$1 reg=$2
  for coll in all_reduce all_gather; do
    echo "## goccl perf $coll -R $reg, GOCCL_NET=$net GOCCL_SHM_DISABLE=1 (GB/s = 1e9 bytes/s)"
    GOCCL_NET=$net GOCCL_SHM_DISABLE=1 GOCCL_DEBUG=INFO "$out/goccl" run -np "$NP" "$out/goccl" perf $coll \
      -b 1M -e 64M -f 8 -n "$ITERS" -w 3 -R "$reg" >"$out/perf.txt" 2>&1 || { cat "$out/perf.txt"; exit 1; }
    grep -m1 -o 'via [^ ]*' "$out/perf.txt" | head -1
    grep -E '^\[0\] +#|^\[0\] +[0-9]' "$out/perf.txt" | sed 's/^\[0\]//'
  done
done
