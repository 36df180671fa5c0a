#!/usr/bin/env bash
# Flat against hierarchical collectives on a cluster of network-namespace
# hosts with shaped links (goccl cluster), beside OpenMPI on the same
# cluster: H hosts x L ranks per host, started with goccl run -H (goccl)
# and mpirun --hostfile (OpenMPI's tuned collectives, then its hierarchical
# HAN component), both through goccl cluster rsh. goccl runs GOCCL_ALGO=ring
# (the flat ring, in host-major order) then hier. For each run it prints the
# table and the bytes host 0 sent on its link per operation (from the
# link's tx counter), beside the prediction: 2(P-1)/P*S for a flat ring's
# host boundary, 2(H-1)/H*S for the hierarchical AllReduce. busbw over
# hosts is algbw*2(H-1)/H. Needs root, iproute2 and (for the OpenMPI rows)
# openmpi-bin and libopenmpi-dev.
#
# Usage: scripts/hier-bench.sh [HOSTS (2)] [PERHOST (2)] [RATE (1gbit)] [COLL (all_reduce)] [SIZE (32M)] [ITERS (5)]
# MPI_COLLS="tuned" leaves out HAN (15-35x slower than tuned here).
# PEERS (scripts/peers) is the directory of mpi_coll_perf.c.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
H=${1:-2} L=${2:-2} RATE=${3:-1gbit} COLL=${4:-all_reduce} SIZE=${5:-32M} ITERS=${6:-5}
WARMUP=2
name=hb$$
out=$(mktemp -d /tmp/hier-bench.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; "$out/goccl" cluster down --name $name >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
go build -o "$out/goccl" ./cmd/goccl
"$out/goccl" cluster up --hosts "$H" --bw "$RATE" --name "$name" --slots "$L" --hostfile "$out/hosts" >/dev/null
n=$((H * L))
hosts=$(for i in $(seq 0 $((H - 1))); do printf '%s-h%d:%d,' "$name" "$i" "$L"; done)
hosts=${hosts%,}
ompi=$(mpirun --version 2>/dev/null | head -1 || true)
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs, $(go version | cut -d' ' -f3), ${ompi:-no OpenMPI}, $H hosts x $L ranks, links $RATE, $COLL $SIZE, $ITERS iterations after $WARMUP"
txbytes() { ip netns exec "$name-h0" cat /sys/class/net/eth0/statistics/tx_bytes; }
# report NAME OPS BEFORE AFTER PRED_FACTOR: host 0's bytes per operation.
report() {
  awk -v d=$(($4 - $3)) -v ops="$2" -v f="$5" -v s="$SIZE_B" -v what="$1" 'BEGIN {
    printf "%s: host 0 sent %.0f bytes (%.2f x S) per operation on its link (headers included)", what, d/ops, d/ops/s
    if (f != "-") printf "; prediction %.0f (%.2f x S)", f*s, f
    printf "\n" }'
}
SIZE_B=$(numfmt --from=iec "$SIZE")
ring=$(awk -v P="$n" 'BEGIN{print 2*(P-1)/P}')
hier=$(awk -v H="$H" 'BEGIN{print 2*(H-1)/H}')
for algo in ring hier; do
  before=$(txbytes)
  "$out/goccl" run -H "$hosts" --rsh "$out/goccl cluster rsh" --env GOCCL_ALGO=$algo \
    "$out/goccl" perf "$COLL" -b "$SIZE" -e "$SIZE" -n "$ITERS" -w "$WARMUP" -c 0 >"$out/goccl.txt" 2>&1 || { cat "$out/goccl.txt"; exit 1; }
  after=$(txbytes)
  echo "## goccl GOCCL_ALGO=$algo"
  grep -E '^\[0\] +[0-9]' "$out/goccl.txt" | sed 's/^\[0\]//'
  f=$ring; [ $algo = hier ] && f=$hier
  # goccl perf runs WARMUP operations at the largest and at the smallest
  # size (both SIZE here), then, out of place and in place, one untimed
  # first call and ITERS timed ones.
  report "goccl $algo" $((2 * WARMUP + 2 * (ITERS + 1))) "$before" "$after" "$f"
done
# The links' ceiling for a ring's pattern: iperf3 from every host to the
# next at once (L flows each, as L ranks per host send), payload per host.
if command -v iperf3 >/dev/null; then
  addr() { "$out/goccl" cluster status --name "$name" | awk -v h="$name-h$1" '$1==h{print $2; exit}'; }
  srvs=()
  for i in $(seq 0 $((H - 1))); do
    timeout 60 ip netns exec "$name-h$i" iperf3 -s -1 -p 5299 >/dev/null 2>&1 &
    srvs+=($!)
  done
  sleep 0.5
  clis=()
  for i in $(seq 0 $((H - 1))); do
    ip netns exec "$name-h$i" iperf3 -c "$(addr $(((i + 1) % H)))" -p 5299 -P "$L" -t 5 -J >"$out/iperf$i.json" &
    clis+=($!)
  done
  for p in "${clis[@]}"; do wait "$p" || { echo "iperf3 failed:"; cat "$out"/iperf*.json; exit 1; }; done
  wait "${srvs[@]}" || true
  echo "## iperf3, every host to the next at once ($L flows each), payload MB/s (1e6) per host"
  for i in $(seq 0 $((H - 1))); do
    python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["end"]["sum_received"]; print("%s %.1f" % (sys.argv[2], e["bytes"]/e["seconds"]/1e6))' "$out/iperf$i.json" "$i"
  done | awk '{s+=$2; printf "host %d: %s\n", $1, $2} END {printf "mean %.1f MB/s\n", s/NR}'
fi
if command -v mpicc >/dev/null && [ "$COLL" != reduce ] && [ "$COLL" != sendrecv ]; then
  mpicc -O2 -o "$out/mpi_coll_perf" "${PEERS:-scripts/peers}/mpi_coll_perf.c"
  for coll in ${MPI_COLLS:-tuned han}; do
    mca=(--mca btl self,vader,tcp --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0)
    [ $coll = han ] && mca+=(--mca coll_han_priority 100)
    before=$(txbytes)
    cmd=(mpirun --allow-run-as-root --hostfile "$out/hosts" --map-by slot -np "$n"
      --mca plm_rsh_agent "$out/goccl cluster rsh" "${mca[@]}"
      "$out/mpi_coll_perf" -c "$COLL" -b "$SIZE" -e "$SIZE" -n "$ITERS" -w "$WARMUP")
    # The remote shell takes one command line, as ssh does: quote it.
    "$out/goccl" cluster rsh "$name-h0" "$(printf '%q ' "${cmd[@]}")" >"$out/mpi.txt" 2>&1 || { cat "$out/mpi.txt"; exit 1; }
    after=$(txbytes)
    echo "## OpenMPI coll $coll"
    grep -E '^ +[0-9]' "$out/mpi.txt"
    # mpi_coll_perf runs warm-up, timed and one checked operation per size.
    report "OpenMPI $coll" $((ITERS + WARMUP + 1)) "$before" "$after" -
  done
fi
