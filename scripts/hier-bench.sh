#!/usr/bin/env bash
# Flat against hierarchical collectives on a cluster of network-namespace
# hosts with shaped links (goccl cluster): H hosts x L ranks per host, one
# goccl perf rank per process started inside its host with ip netns exec,
# GOCCL_ALGO=ring (the flat ring, in host-major order) then hier. For each
# run it prints goccl perf's table and the bytes host 0 sent on its link per
# operation (from the link's tx counter), beside the prediction: 2(P-1)/P*S
# for the flat ring's host boundary, 2(H-1)/H*S for the hierarchical
# AllReduce. busbw over hosts is algbw*2(H-1)/H. Needs root and iproute2.
#
# Usage: scripts/hier-bench.sh [HOSTS (2)] [PERHOST (2)] [RATE (1gbit)] [COLL (all_reduce)] [SIZE (32M)] [ITERS (5)]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
H=${1:-2} L=${2:-2} RATE=${3:-1gbit} COLL=${4:-all_reduce} SIZE=${5:-32M} ITERS=${6:-5}
WARMUP=2
name=hb$$
out=$(mktemp -d /tmp/hier-bench.XXXXXX)
go build -o "$out/goccl" ./cmd/goccl
trap '"$out/goccl" cluster down --name $name >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
"$out/goccl" cluster up --hosts "$H" --bw "$RATE" --name "$name" >/dev/null
n=$((H * L))
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs, $(go version | cut -d' ' -f3), $H hosts x $L ranks, links $RATE, $COLL $SIZE, $ITERS iterations after $WARMUP"
txbytes() { ip netns exec "$name-h0" cat /sys/class/net/eth0/statistics/tx_bytes; }
for algo in ring hier; do
  port=$((30000 + RANDOM % 1000))
  before=$(txbytes)
  pids=()
  for r in $(seq 0 $((n - 1))); do
    ip netns exec "$name-h$((r / L))" env GOCCL_RANK=$r GOCCL_WORLD_SIZE=$n GOCCL_LOCAL_RANK=$((r % L)) \
      GOCCL_LOCAL_WORLD_SIZE=$L GOCCL_STORE_ADDR=10.200.0.1:$port GOCCL_ALGO=$algo GOCCL_JOB_TOKEN=bench$$ \
      "$out/goccl" perf "$COLL" -b "$SIZE" -e "$SIZE" -n "$ITERS" -w "$WARMUP" -c 0 >"$out/rank$r.txt" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { cat "$out/rank0.txt"; exit 1; }; done
  after=$(txbytes)
  echo "## GOCCL_ALGO=$algo"
  grep -E '^ +[0-9]' "$out/rank0.txt"
  awk -v d=$((after - before)) -v ops=$((2 * (ITERS + WARMUP))) -v H="$H" -v P="$n" -v algo="$algo" -v s="$(grep -E '^ +[0-9]' "$out/rank0.txt" | awk '{print $1}')" 'BEGIN {
    pred = (algo == "ring") ? 2*(P-1)/P*s : 2*(H-1)/H*s
    printf "host 0 sent %.0f bytes per operation on its link (out of place and in place; protocol overhead included); prediction %.0f (%.2f x S)\n", d/ops, pred, pred/s }'
done
