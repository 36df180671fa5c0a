#!/usr/bin/env bash
# The seeds' dataparallel-vs-ddp lab on examples/ddp-mnist: the
# DataParallel pattern (-dataparallel N: one process drives N replicas,
# replicating the parameters, scattering the batch, gathering and adding
# the gradients on the main replica, which updates alone) against DDP (N
# processes, goccl run -np N: each rank updates its own replica after the
# gradient AllReduce), for N = 1 to 4, one run after the other, the same
# global batch and steps. Prints a markdown table: mean step time after
# 10 warm-up steps, throughput in samples/s and the speed-up over N = 1
# for each, and DataParallel's serial part: the main replica alone
# replicating the parameters, adding up the gradients and updating.
#
# Usage: scripts/dp-vs-ddp.sh
# Environment: STEPS (200), BATCH (128, global), NS ("1 2 3 4").
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-200} BATCH=${BATCH:-128} NS=${NS:-1 2 3 4}
out=$(mktemp -d /tmp/dp-vs-ddp.XXXXXX)
trap 'rm -rf "$out"' EXIT
export PATH="$PATH:/usr/local/go/bin"
go build -o "$out/goccl" ./cmd/goccl
go build -o "$out/ddp-mnist" ./examples/ddp-mnist
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $(go version | cut -d' ' -f3), MLP 784-1024-256-10, global batch $BATCH, $STEPS steps"
summary() { sed -n 's/^\(\[0\] \)\{0,1\}summary: //p' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
echo "| replicas | DataParallel step ms (serial) | samples/s | speed-up | DDP step ms | samples/s | speed-up | DDP / DataParallel throughput |"
echo "|---|---|---|---|---|---|---|---|"
dp1= ddp1=
for n in $NS; do
  "$out/ddp-mnist" -dataparallel "$n" -steps "$STEPS" -batch "$BATCH" >"$out/dp$n" 2>&1 || { cat "$out/dp$n"; exit 1; }
  "$out/goccl" run -np "$n" "$out/ddp-mnist" -steps "$STEPS" -batch "$BATCH" -overlap=true >"$out/ddp$n" 2>&1 || { cat "$out/ddp$n"; exit 1; }
  dp=$(summary "$out/dp$n" step_ms) ser=$(summary "$out/dp$n" serial_ms) ddp=$(summary "$out/ddp$n" step_ms)
  dp1=${dp1:-$dp} ddp1=${ddp1:-$ddp}
  awk -v n="$n" -v b="$BATCH" -v dp="$dp" -v ser="$ser" -v ddp="$ddp" -v dp1="$dp1" -v ddp1="$ddp1" 'BEGIN {
    printf "| %d | %.1f (%.1f) | %.0f | %.2f | %.1f | %.0f | %.2f | %.2f |\n", n, dp, ser, 1000*b/dp, dp1/dp, ddp, 1000*b/ddp, ddp1/ddp, dp/ddp }'
done
