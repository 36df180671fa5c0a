#!/usr/bin/env bash
# The seeds' congestion symptom, measured (issue 34, item 5): p50 and p99
# step time of examples/ddp-mnist on 4 namespace hosts, one rank each, on
# a shallow-buffer fabric (goccl cluster up: links of RATE, QUEUE bytes of
# queue at each switch port towards a host, the hosts' NIC queues at their
# default depth, CE marked above ECN bytes queued to a host), alone and
# beside a background iperf3 TCP flow from host 2 into host 1 (whose port
# the ring's traffic into host 1 shares), for goccl over TCP and over the
# soft RoCE device, and over RoCE with congestion control when CC_ENV
# names the variable setting that turns it on (KEY=VALUE).
#
# Usage: scripts/congestion-lab.sh   (root)
# Environment: RATE (500mbit), QUEUE (65536), ECN (32768), STEPS (300),
#              CC_ENV ("": no congestion-control rows).
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${RATE:-500mbit} QUEUE=${QUEUE:-65536} ECN=${ECN:-32768} STEPS=${STEPS:-300} CC_ENV=${CC_ENV:-}
name=cl$$
out=$(mktemp -d /tmp/congestion-lab.XXXXXX)
cleanup() {
  pkill -f "iperf3 -s -p 5299" 2>/dev/null || true
  "$out/goccl" cluster down --name $name >/dev/null 2>&1 || true
  rm -rf "$out"
}
trap cleanup EXIT
export PATH="$PATH:/usr/local/go/bin"
go build -o "$out/goccl" ./cmd/goccl
go build -o "$out/ddp-mnist" ./examples/ddp-mnist
g=$out/goccl
"$g" cluster up --hosts 4 --bw "$RATE" --port-queue "$QUEUE" --ecn "$ECN" --name $name >/dev/null
h1=$("$g" cluster status --name $name | awk -v h=$name-h1 '$1 == h { print $3 }')
echo "# $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $(go version | cut -d' ' -f3), iperf3 $(iperf3 --version | head -1 | cut -d' ' -f2)"
echo "# 4 hosts × 1 rank, links $RATE, queue $QUEUE B, ECN above $ECN B, ddp-mnist -steps $STEPS -overlap=true"
echo "| transport | background | step p50 ms | step p99 ms | p99/p50 | mean ms | exposed ms | drops | ECN marks |"
echo "|---|---|---|---|---|---|---|---|---|"
summary() { sed -n 's/^\[0\] summary: //p' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
# counters: the packets dropped by the shapers (each host's egress and
# its switch port, cluster status columns 7 and 11) and the ECN marks at
# the switch ports (column 12), summed over the hosts.
counters() { "$g" cluster status --name $name | awk -v n=$name '$1 ~ "^" n "-h" { d += $7 + $11; m += $12 } END { print d + 0, m + 0 }'; }
rows=("TCP|GOCCL_NET=socket" "RoCE|GOCCL_NET=roce")
[ -n "$CC_ENV" ] && rows+=("RoCE + CC|GOCCL_NET=roce $CC_ENV")
for bg in none iperf3; do
  if [ $bg = iperf3 ]; then
    ip netns exec $name-h1 iperf3 -s -p 5299 -D
    sleep 0.5
    ip netns exec $name-h2 iperf3 -c "$h1" -p 5299 -t 3600 >/dev/null 2>&1 &
    sleep 2
  fi
  for row in "${rows[@]}"; do
    label=${row%%|*} envs=()
    for kv in ${row#*|}; do envs+=(--env "$kv"); done
    read -r d0 m0 < <(counters)
    if ! "$g" run -H "$name-h0:1,$name-h1:1,$name-h2:1,$name-h3:1" --rsh "$g cluster rsh" --env GOCCL_SHM_DISABLE=1 "${envs[@]}" \
      "$out/ddp-mnist" -steps "$STEPS" -overlap=true >"$out/run" 2>&1; then
      # A failed job is a row too: the first rank's error, shortened.
      read -r d1 m1 < <(counters)
      why=$(grep -o 'IBV_WC_[A-Z_]*\|timed out\|rank [0-9]* lost' "$out/run" | head -1)
      echo "| $label | $bg | failed: $why | | | | | $((d1 - d0)) | $((m1 - m0)) |"
      continue
    fi
    read -r d1 m1 < <(counters)
    p50=$(summary "$out/run" step_p50_ms) p99=$(summary "$out/run" step_p99_ms)
    awk -v l="$label" -v b=$bg -v p50="$p50" -v p99="$p99" -v m="$(summary "$out/run" step_ms)" -v w="$(summary "$out/run" wait_ms)" \
      -v d=$((d1 - d0)) -v e=$((m1 - m0)) 'BEGIN { printf "| %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %d | %d |\n", l, b, p50, p99, p99 / p50, m, w, d, e }'
  done
  [ $bg = iperf3 ] && { pkill -f "iperf3 -c $h1 -p 5299" || true; pkill -f "iperf3 -s -p 5299" || true; }
done
