#!/usr/bin/env bash
# RoCE incast (issue 34, item 4): a namespace cluster of 4 hosts, every
# link RATE, host 1's switch port a shallow QUEUE-byte queue that marks CE
# above ECN bytes (goccl cluster up --port-queue --ecn; the hosts' own NIC
# queues keep their default depth). Three goccl roce write-bw clients
# (hosts 0, 2, 3) write ITERS × 1 MiB each into three servers on host 1 at
# once, first without congestion control, then with DCQCN (--dcqcn RATE on
# both sides). Prints, per run, rate-plot's table (each flow's goodput,
# resends, CNPs, rate cuts; the aggregate over the span all three ran and
# its share of the link) and the drops and CE marks at host 1's port, and
# draws each flow's goodput and DCQCN rate over time to
# OUT/incast-{none,dcqcn}.png (gonum/plot). PARAMS, if given, are DCQCN
# parameters other than ConnectX's defaults (write-bw --dcqcn-params,
# mlx5's names), for a third run, dcqcn-tuned. MTU in the environment sets
# the links' MTU (1500 when unset; RoCE fabrics run jumbo frames), RUNS
# a subset of the runs ("dcqcn-tuned").
#
# Usage: scripts/incast-bench.sh [RATE (1gbit)] [QUEUE (131072)] [ECN (32768)] [ITERS (100)] [OUT (.)] [PARAMS]   (root)
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${1:-1gbit} QUEUE=${2:-131072} ECN=${3:-32768} ITERS=${4:-100} OUT=${5:-.} PARAMS=${6:-}
name=ic$$
tmp=$(mktemp -d /tmp/incast-bench.XXXXXX)
trap '"$tmp/goccl" cluster down --name $name >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
export PATH="$PATH:/usr/local/go/bin"
go build -o "$tmp/goccl" ./cmd/goccl
g=$tmp/goccl
echo "# $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $(go version | cut -d' ' -f3); 3 -> 1 at $RATE, port queue $QUEUE B, CE above $ECN B, $ITERS x 1 MiB per flow, MTU ${MTU:-1500}"${PARAMS:+; tuned DCQCN: $PARAMS}
runs="none dcqcn"
[ -n "$PARAMS" ] && runs="$runs dcqcn-tuned"
runs=${RUNS:-$runs} # RUNS in the environment: a subset
for cc in $runs; do
  "$g" cluster up --hosts 4 --bw "$RATE" --port-queue "$QUEUE" --ecn "$ECN" --mtu "${MTU:-1500}" --name "$name" >/dev/null
  dst=$("$g" cluster status --name "$name" | awk -v h="$name-h1" '$1 == h {print $3; exit}')
  flags=()
  [ "$cc" = dcqcn ] && flags=(--dcqcn "$RATE")
  [ "$cc" = dcqcn-tuned ] && flags=(--dcqcn "$RATE" --dcqcn-params "$PARAMS")
  for i in 0 1 2; do
    ip netns exec "$name-h1" "$g" roce write-bw -p $((18515 + i)) --dev-port $((4791 + i)) -s 1M -n "$ITERS" "${flags[@]}" >"$tmp/srv$i" 2>&1 &
  done
  sleep 0.5
  logs=() j=0
  for h in 0 2 3; do
    ip netns exec "$name-h$h" "$g" roce write-bw -p $((18515 + j)) -s 1M -n "$ITERS" "${flags[@]}" --rate-log "$tmp/rate$j.csv" "$dst" >"$tmp/cli$j" 2>&1 &
    logs+=("$tmp/rate$j.csv=h$h")
    j=$((j + 1))
  done
  wait
  echo; echo "## $cc"
  "$g" roce rate-plot -o "$OUT/incast-$cc.png" --link "$RATE" --title "3 -> 1 at $RATE, $cc" "${logs[@]}"
  "$g" cluster status --name "$name" | awk -v h="$name-h1" '$1 == h {print "host 1 port: drops " $11 ", CE marks " $12}'
  "$g" cluster down --name "$name" >/dev/null
done
