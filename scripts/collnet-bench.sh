#!/usr/bin/env bash
# In-network aggregation (GOCCL_COLLNET_ENABLE=1 through `goccl aggd`)
# against the ring AllReduce on a cluster of network-namespace hosts with
# shaped links (goccl cluster): N hosts with one rank each, the aggregation
# node in the switch's namespace on an address of the bridge — where
# SHARP's aggregation runs, in the switch, so its own port is not one of
# the shaped host links. For each run it prints goccl perf's table and the
# bytes host 0 sent on its link per operation (its tx counter) beside the
# prediction: 2(N-1)/N*S for the ring, S for CollNet. busbw uses the
# nccl-tests formula (algbw*2(N-1)/N) for both, so the ratio of busbw is
# the ratio of speed. With NET=roce the ranks' links and the tree's data
# path run over soft RoCE v2 (GOCCL_NET=roce, goccl aggd --roce); QUEUE
# (bytes, goccl cluster --queue) deepens the shapers' queues: the soft
# device has no congestion control, and a queue shallower than the queue
# pairs' windows (256 packets each) drops enough to exhaust their retries
# (a deep queue stands in for a lossless, PFC-paused fabric); MTU is the
# links' (9000: jumbo frames, 4096-byte RoCE packets, as RoCE fabrics run).
# Needs root and iproute2.
#
# With PERHOST ranks per host (more than 1), the links' side runs the
# hierarchical AllReduce (GOCCL_ALGO=hier: 2(H-1)/H*S per host link) and
# CollNet runs as NCCL's chain (each local rank's share of its host's
# reduction through the tree: S per host link).
#
# Usage: scripts/collnet-bench.sh [HOSTS (8)] [RATE (200mbit)] [SIZE (16M)] [ITERS (5)] [NET (tcp)] [QUEUE (0: the cluster's default)] [MTU (1500)] [PERHOST (1)]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
N=${1:-8} RATE=${2:-200mbit} SIZE=${3:-16M} ITERS=${4:-5} NET=${5:-tcp} QUEUE=${6:-0} MTU=${7:-1500} PERHOST=${8:-1}
aggflags=() netenv=()
if [ "$NET" = roce ]; then
  aggflags=(--roce) netenv=(--env GOCCL_NET=roce)
fi
WARMUP=2
name=cb$$
out=$(mktemp -d /tmp/collnet-bench.XXXXXX)
go build -o "$out/goccl" ./cmd/goccl
trap 'kill %1 2>/dev/null || true; "$out/goccl" cluster down --name $name >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
"$out/goccl" cluster up --hosts "$N" --bw "$RATE" --queue "$QUEUE" --mtu "$MTU" --name "$name" >/dev/null
agg=10.200.0.254
ip -n "$name-sw" addr add "$agg/24" dev br0
ip netns exec "$name-sw" "$out/goccl" aggd --listen "$agg:7400" --fanin 64 "${aggflags[@]}" >"$out/aggd.txt" 2>&1 &
for _ in $(seq 50); do grep -q listening "$out/aggd.txt" && break; sleep 0.1; done
hosts=$(for i in $(seq 0 $((N - 1))); do printf '%s-h%d:%d,' "$name" "$i" "$PERHOST"; done)
hosts=${hosts%,}
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs, $(go version | cut -d' ' -f3), $N hosts x $PERHOST ranks, links $RATE, all_reduce $SIZE, $ITERS iterations after $WARMUP, over $NET, queue $QUEUE, MTU $MTU"
txbytes() { ip netns exec "$name-h0" cat /sys/class/net/eth0/statistics/tx_bytes; }
SIZE_B=$(numfmt --from=iec "$SIZE")
for mode in ring collnet; do
  env=(--env GOCCL_ALGO=ring "${netenv[@]}" --env GOCCL_DEBUG=INFO --env GOCCL_DEBUG_SUBSYS=NET)
  pred=$(awk -v N="$N" 'BEGIN{print 2*(N-1)/N}')
  if [ "$PERHOST" -gt 1 ]; then
    env[1]=GOCCL_ALGO=hier
    pred=$(awk -v H="$N" 'BEGIN{print 2*(H-1)/H}')
  fi
  if [ $mode = collnet ]; then
    env=(--env GOCCL_COLLNET_ENABLE=1 --env "GOCCL_COLLNET_AGGD=$agg:7400" "${netenv[@]}" --env GOCCL_DEBUG=INFO --env GOCCL_DEBUG_SUBSYS=INIT,COLL,NET)
    pred=1
  fi
  before=$(txbytes)
  "$out/goccl" run -H "$hosts" --rsh "$out/goccl cluster rsh" "${env[@]}" \
    "$out/goccl" perf all_reduce -b "$SIZE" -e "$SIZE" -n "$ITERS" -w "$WARMUP" -c 0 >"$out/perf.txt" 2>&1 || { cat "$out/perf.txt"; exit 1; }
  after=$(txbytes)
  echo "## $mode ($(echo "${env[@]}" | grep -o "GOCCL_ALGO=[a-z]*\|GOCCL_COLLNET_ENABLE=1"))"
  grep -m1 -o 'via NET/RoCE/v[12]' "$out/perf.txt" || true
  if [ $mode = collnet ]; then
    grep -m1 -o 'AllReduce uses collnet' "$out/perf.txt"
    grep -m1 -o 'attached to aggregation node .*' "$out/perf.txt"
    grep -m1 -o 'CollNet chain: [0-9]* hosts x [0-9]* ranks' "$out/perf.txt" || true
  fi
  grep -E '^\[0\] +[0-9]' "$out/perf.txt" | sed 's/^\[0\]//'
  # goccl perf: WARMUP operations at the largest and the smallest size
  # (both SIZE), then out of place and in place one untimed first call and
  # ITERS timed ones.
  ops=$((2 * WARMUP + 2 * (ITERS + 1)))
  awk -v d=$((after - before)) -v ops="$ops" -v f="$pred" -v s="$SIZE_B" -v m="$mode" 'BEGIN {
    printf "%s: host 0 sent %.0f bytes (%.3f x S) per operation on its link; prediction %.3f x S\n", m, d/ops, d/ops/s, f }'
done
echo "## collnet, results checked (8 B to 4 MiB)"
"$out/goccl" run -H "$hosts" --rsh "$out/goccl cluster rsh" --env GOCCL_COLLNET_ENABLE=1 --env "GOCCL_COLLNET_AGGD=$agg:7400" "${netenv[@]}" \
  "$out/goccl" perf all_reduce -b 8 -e 4M -f 64 -n 2 -w 1 -c 1 >"$out/check.txt" 2>&1 || { cat "$out/check.txt"; exit 1; }
grep -E 'Out of bounds' "$out/check.txt" | sed 's/^\[0\]//'
