#!/usr/bin/env bash
# The RoCE transport's AllReduce beside the soft RoCE device's own ceiling
# on a cluster of network-namespace hosts with shaped links (goccl cluster),
# in one run: `goccl roce write-bw` (perftest's ib_write_bw: one QP, one
# way) from host 0 to host 1 at 1, 8 and 64 MiB, the same with -b (both
# ways at once, as a ring's ranks send and receive), then `goccl perf
# all_reduce` with one rank per host over RoCE v2 (GOCCL_NET=roce),
# unregistered (-R 0) and registered (-R 1), and over TCP (GOCCL_NET=socket)
# for comparison. busbw uses the nccl-tests formula (algbw*2(N-1)/N): every
# host link carries busbw each way, so the link is its bound, as it is
# write-bw's. write-bw prints MB = 2^20 bytes; goccl perf prints GB = 1e9
# bytes. QUEUE deepens the shapers' queues (the soft device has no
# congestion control: a deep queue stands in for a lossless, PFC-paused
# fabric); MTU 9000 gives 4096-byte RoCE packets, as RoCE fabrics run.
# Needs root and iproute2.
#
# Usage: scripts/roce-cluster-bench.sh [HOSTS (2)] [RATE (250mbit)] [ITERS (5)] [QUEUE (4000000)] [MTU (9000)]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
N=${1:-2} RATE=${2:-250mbit} ITERS=${3:-5} QUEUE=${4:-4000000} MTU=${5:-9000}
name=rb$$
out=$(mktemp -d /tmp/roce-cluster-bench.XXXXXX)
G=$out/goccl
trap 'kill $(jobs -p) 2>/dev/null || true; "$G" cluster down --name $name >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
go build -o "$G" ./cmd/goccl
"$G" cluster up --hosts "$N" --bw "$RATE" --queue "$QUEUE" --mtu "$MTU" --name "$name" >/dev/null
addr() { "$G" cluster status --name "$name" | awk -v h="$name-h$1" '$1==h{print $2; exit}'; }
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs, $(go version | cut -d' ' -f3), $N hosts x 1 rank, links $RATE, queue $QUEUE, MTU $MTU"
port=18700
wbw() { # FLAGS...: write-bw server on host 1, client on host 0 (dials until the server listens)
  ip netns exec "$name-h1" "$G" roce write-bw -p $port "$@" >/dev/null 2>&1 &
  local srv=$! res=""
  for _ in $(seq 50); do
    if res=$(ip netns exec "$name-h0" "$G" roce write-bw -p $port "$@" "$(addr 1)" 2>/dev/null); then break; fi
    sleep 0.1
  done
  wait $srv
  grep -E '^ +[0-9]' <<<"$res"
  port=$((port + 1))
}
echo "## goccl roce write-bw, host 0 to host 1 (one QP, one way; MB/sec = 2^20 bytes/s)"
for size in 1M 8M 64M; do
  wbw -s $size -n $((128 * 1024 * 1024 / $(numfmt --from=iec $size)))
done
echo "## goccl roce write-bw -b (both ways at once, the sum, as ib_write_bw -b; MB/sec = 2^20 bytes/s)"
for size in 1M 8M 64M; do
  wbw -b -s $size -n $((128 * 1024 * 1024 / $(numfmt --from=iec $size)))
done
hosts=$(for i in $(seq 0 $((N - 1))); do printf '%s-h%d:1,' "$name" "$i"; done)
hosts=${hosts%,}
perf() { # LABEL NET REG
  echo "## goccl perf all_reduce, $1"
  "$G" run -H "$hosts" --rsh "$G cluster rsh" --env GOCCL_NET="$2" --env GOCCL_DEBUG=INFO --env GOCCL_DEBUG_SUBSYS=NET \
    "$G" perf all_reduce -b 1M -e 64M -f 8 -n "$ITERS" -w 2 -R "$3" >"$out/perf.txt" 2>&1 || { cat "$out/perf.txt"; exit 1; }
  grep -E '^\[0\] +[0-9]' "$out/perf.txt" | sed 's/^\[0\]//'
  { grep -o 'via NET/[A-Za-z0-9/]*' "$out/perf.txt" || true; } | sort | uniq -c
}
perf "RoCE (GOCCL_NET=roce), unregistered (-R 0)" roce 0
perf "RoCE (GOCCL_NET=roce), registered (-R 1)" roce 1
perf "TCP (GOCCL_NET=socket)" socket 0
