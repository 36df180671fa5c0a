#!/usr/bin/env bash
# The seeds' topology-aware-bandwidth lab: what a bad rank placement costs
# on a namespace cluster (goccl cluster up: 2 hosts, links shaped to RATE)
# and what goccl sim predicts for it. The job is launched host-major
# (goccl run -H h0:L,h1:L: ranks 0..L-1 on host 0); goccl perf --map-by
# node renumbers the ranks round-robin over the hosts (mpirun --map-by
# node's placement), so a rank-ordered ring crosses between the hosts on
# every hop instead of twice. For each collective, the runtime's choice
# and the flat ring (GOCCL_ALGO=ring), both placements: the measured busbw
# at SIZE (goccl perf -a 3: the slowest rank's time, 5 iterations after 2)
# and goccl sim's prediction on its goccl-netns preset (2 hosts × 2, 1
# Gbit/s NIC) with the same --map-by and algorithm.
#
# Usage: scripts/placement-lab.sh [RATE (1gbit)] [SIZE (16M)]   (root)
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${1:-1gbit} SIZE=${2:-16M} L=2
name=pl$$
out=$(mktemp -d /tmp/placement-lab.XXXXXX)
trap '"$out/goccl" cluster down --name $name >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
export PATH="$PATH:/usr/local/go/bin"
go build -o "$out/goccl" ./cmd/goccl
g=$out/goccl
"$g" cluster up --hosts 2 --bw "$RATE" --name "$name" --slots "$L" >/dev/null
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $(go version | cut -d' ' -f3), 2 hosts × $L ranks, links $RATE, $SIZE"
bytes=$(numfmt --from=iec "$SIZE")
# busbw FILE: the out-of-place busbw of the table's SIZE row.
busbw() { sed "s/^\[0\] //" "$1" | awk -v b="$bytes" '$1 == b { print $8; exit }'; }
echo "| collective | algorithm | placement | measured busbw GB/s | round-robin / host-major | sim busbw GB/s | sim round-robin / host-major | sim's algorithm |"
echo "|---|---|---|---|---|---|---|---|"
for coll in all_reduce all_gather reduce_scatter; do
  for algo in default ring; do
    env=() simalgo=()
    [ "$algo" = ring ] && env=(--env GOCCL_ALGO=ring) simalgo=(-a ring)
    base= sbase=
    for map in slot node; do
      "$g" run -H "$name-h0:$L,$name-h1:$L" --rsh "$g cluster rsh" "${env[@]}" \
        "$g" perf "$coll" -b "$SIZE" -e "$SIZE" -n 5 -w 2 -a 3 --map-by "$map" >"$out/m" 2>&1 || { cat "$out/m"; exit 1; }
      "$g" sim collective -t goccl-netns -c "$coll" -b "$SIZE" -e "$SIZE" --map-by "$map" "${simalgo[@]}" >"$out/s"
      m=$(busbw "$out/m") s=$(busbw "$out/s")
      salgo=$(sed -n 's/^#   [0-9].*: \([a-z]*\).*/\1/p' "$out/s" | head -1)
      base=${base:-$m} sbase=${sbase:-$s}
      awk -v c="$coll" -v a="$algo" -v p="$map" -v m="$m" -v s="$s" -v b="$base" -v sb="$sbase" -v sa="$salgo" 'BEGIN {
        printf "| %s | %s | %s | %.3f | %.2f | %.3f | %.2f | %s |\n", c, a, p == "slot" ? "host-major" : "round-robin", m, m/b, s, s/sb, sa }'
    done
  done
done
