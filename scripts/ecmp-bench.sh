#!/usr/bin/env bash
# RoCE over ECMP (issue 34, item 4: NCCL_IB_QPS_PER_CONNECTION's role): a
# namespace cluster of HOSTS hosts with two rails each (goccl cluster up
# --rails 2, every link shaped to RATE) made into a routed fabric: each
# host's address is on an interface of its own (lb0, a /32), and its route
# to every other host's is an equal-cost multipath over both rails hashed
# on the 5-tuple (fib_multipath_hash_policy 1, as ECMP switches hash). One
# rank per host runs goccl perf all_reduce from 8 MiB to 64 MiB over RoCE
# with GOCCL_IB_QPS_PER_CONNECTION of 1, 4 and 16: each queue pair sends
# from a UDP source port of its own, so the hash can spread a connection
# over both paths. Prints busbw (nccl-tests' formula, GB/s = 1e9 B/s), the
# ratio to one queue pair, and the share of host 0's bytes on its busier
# rail.
#
# Usage: scripts/ecmp-bench.sh [HOSTS (2)] [RATE (500mbit)] [ITERS (5)]   (root)
set -euo pipefail
cd "$(dirname "$0")/.."
HOSTS=${1:-2} RATE=${2:-500mbit} ITERS=${3:-5}
name=eb$$
out=$(mktemp -d /tmp/ecmp-bench.XXXXXX)
trap '"$out/goccl" cluster down --name $name >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
export PATH="$PATH:/usr/local/go/bin"
go build -o "$out/goccl" ./cmd/goccl
g=$out/goccl
"$g" cluster up --hosts "$HOSTS" --rails 2 --bw "$RATE" --name "$name" >/dev/null
lb() { echo "10.232.0.$(($1 + 1))"; }
# rail r's address of host h: goccl cluster status's third column, rail rows.
addr() { "$g" cluster status --name "$name" | awk -v h="$name-h$1" -v r="eth$2" '$1 == h && $2 == r { sub("/.*", "", $3); print $3 }'; }
for h in $(seq 0 $((HOSTS - 1))); do
  on() { ip netns exec "$name-h$h" "$@"; }
  on ip link add lb0 type veth peer name lb0p
  on ip link set lb0p up
  on ip link set lb0 up
  on ip addr add "$(lb "$h")/32" dev lb0
  on sysctl -qw net.ipv4.fib_multipath_hash_policy=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
    net.ipv4.conf.eth0.rp_filter=0 net.ipv4.conf.eth1.rp_filter=0
  for p in $(seq 0 $((HOSTS - 1))); do
    [ "$p" = "$h" ] && continue
    on ip route add "$(lb "$p")/32" nexthop via "$(addr "$p" 0)" dev eth0 nexthop via "$(addr "$p" 1)" dev eth1
  done
done
hosts=$(seq -s, -f "$name-h%g:1" 0 $((HOSTS - 1)))
tx() { ip netns exec "$name-h0" cat /sys/class/net/eth0/statistics/tx_bytes /sys/class/net/eth1/statistics/tx_bytes | tr '\n' ' '; }
echo "# $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $(go version | cut -d' ' -f3), $HOSTS hosts × 1 rank, 2 rails of $RATE each, ECMP over both"
# packets dropped at the hosts' egress and at the switch ports (columns 7 and 11)
drops() { "$g" cluster status --name "$name" | awk -v p="$name-h" 'index($1, p) == 1 && $2 ~ /^eth/ { e += $7; s += $11 } END { print e + 0, s + 0 }'; }
echo "| queue pairs | bytes | busbw GB/s | / 1 queue pair | host 0's bytes on its busier rail | packets dropped at hosts' egress / switch ports |"
echo "|---|---|---|---|---|---|"
for q in 1 4 16; do
  t0=$(tx) d0=$(drops)
  "$g" run -H "$hosts" --rsh "$g cluster rsh" --env GOCCL_SOCKET_IFNAME=lb0 --env GOCCL_NET=roce --env GOCCL_SHM_DISABLE=1 \
    --env GOCCL_IB_QPS_PER_CONNECTION=$q "$g" perf all_reduce -b 8M -e 64M -f 2 -n "$ITERS" -w 2 >"$out/q$q" 2>&1 || { cat "$out/q$q"; exit 1; }
  dropped=$(echo "$d0 $(drops)" | awk '{ print $3 - $1 " / " $4 - $2 }')
  share=$(echo "$t0 $(tx)" | awk '{ a = $3 - $1; b = $4 - $2; printf "%.0f %%", 100 * (a > b ? a : b) / (a + b) }')
  sed 's/^\[0\] //' "$out/q$q" | awk '$1 ~ /^[0-9]+$/ { print $1, $6 }' > "$out/t$q"
  join "$out/t1" "$out/t$q" | awk -v q=$q -v h="$HOSTS" -v s="$share" -v d="$dropped" '{ f = 2 * (h - 1) / h / 1e3
    printf "| %d | %d MiB | %.4f | %.2f | %s | %s |\n", q, $1 / 1048576, $1 / $3 * f, $2 / $3, s, d }'
done
