#!/usr/bin/env bash
# Multi-rail busbw (issue 34, item 2): a namespace cluster of HOSTS hosts
# with two rails each (goccl cluster up --rails 2: a veth, a bridge and a
# subnet per rail, every link shaped to RATE), one rank per host, and
# goccl perf all_reduce from 8 MiB to 64 MiB over one rail
# (GOCCL_SOCKET_IFNAME==eth0) and over both (=eth0,eth1), over TCP and
# over the soft RoCE device (GOCCL_NET=roce: a device per rail). Prints
# the busbw (nccl-tests' formula, GB/s = 1e9 B/s) of each and the ratio.
#
# Usage: scripts/rails-bench.sh [HOSTS (2)] [RATE (500mbit)] [ITERS (5)]   (root)
set -euo pipefail
cd "$(dirname "$0")/.."
HOSTS=${1:-2} RATE=${2:-500mbit} ITERS=${3:-5}
name=rb$$
out=$(mktemp -d /tmp/rails-bench.XXXXXX)
trap '"$out/goccl" cluster down --name $name >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
export PATH="$PATH:/usr/local/go/bin"
go build -o "$out/goccl" ./cmd/goccl
g=$out/goccl
"$g" cluster up --hosts "$HOSTS" --rails 2 --bw "$RATE" --name "$name" >/dev/null
hosts=$(seq -s, -f "$name-h%g:1" 0 $((HOSTS - 1)))
echo "# $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $(go version | cut -d' ' -f3), $HOSTS hosts × 1 rank, 2 rails of $RATE each"
echo "| transport | bytes | 1 rail busbw GB/s | 2 rails busbw GB/s | 2 rails / 1 rail |"
echo "|---|---|---|---|---|"
for net in socket roce; do
  for spec in =eth0 =eth0,eth1; do
    "$g" run -H "$hosts" --rsh "$g cluster rsh" --env GOCCL_SOCKET_IFNAME="$spec" --env GOCCL_NET=$net --env GOCCL_SHM_DISABLE=1 \
      "$g" perf all_reduce -b 8M -e 64M -f 2 -n "$ITERS" -w 2 >"$out/$net$spec" 2>&1 || { cat "$out/$net$spec"; exit 1; }
  done
  # The out-of-place time (column 6, µs) of each size row of both runs,
  # and busbw = bytes / time × 2(n-1)/n (perf prints only 2 decimals).
  join <(sed 's/^\[0\] //' "$out/$net=eth0" | awk '$1 ~ /^[0-9]+$/ { print $1, $6 }') \
       <(sed 's/^\[0\] //' "$out/$net=eth0,eth1" | awk '$1 ~ /^[0-9]+$/ { print $1, $6 }') |
    awk -v n=$net -v h="$HOSTS" '{ f = 2 * (h - 1) / h / 1e3
      printf "| %s | %d MiB | %.4f | %.4f | %.2f |\n", n == "socket" ? "TCP" : "RoCE", $1 / 1048576, $1 / $2 * f, $1 / $3 * f, $2 / $3 }'
done
