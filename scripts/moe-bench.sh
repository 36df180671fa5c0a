#!/usr/bin/env bash
# examples/moe against its dense twin, and its all-to-all on one host and on
# two network-namespace hosts (goccl cluster, links shaped to RATE), printed
# as one markdown table. Runs one after the other:
#   dense:   -experts 0 on NP ranks of this host (the accuracy to match)
#   moe:     -experts 8 -k 2 on NP ranks of this host (shared memory)
#   moe-2h:  the same on 2 hosts x NP/2 ranks (TCP between the hosts)
# Each row: final test accuracy, mean step time after 10 warm-up steps, the
# time blocked in the token exchanges (all-to-all: count exchange,
# dispatch, combine, and the backward's two) and in the replicated
# gradients' AllReduce, with their shares of the step, the mean load
# imbalance (busiest expert / mean) and the share of choices dropped.
#
# Usage: scripts/moe-bench.sh [NP (4)] [RATE (1gbit)] [EPOCHS (3)]
# Needs root for the namespace hosts; without it the 2-host row is skipped
# with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${1:-4} RATE=${2:-1gbit} EPOCHS=${3:-3}
name=moe$$
out=$(mktemp -d /tmp/moe-bench.XXXXXX)
trap '"$out/goccl" cluster down --name $name >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
export PATH="$PATH:/usr/local/go/bin"
go build -o "$out/goccl" ./cmd/goccl
go build -o "$out/moe" ./examples/moe
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $(go version | cut -d' ' -f3), $NP ranks, $EPOCHS epochs"
# summary FILE KEY: KEY= of rank 0's summary line.
summary() { sed -n 's/^\[0\] summary: //p' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
row() {
  local what=$1 f=$2
  awk -v w="$what" -v acc="$(summary "$f" accuracy)" -v st="$(summary "$f" step_ms)" -v a2a="$(summary "$f" a2a_ms)" \
    -v as="$(summary "$f" a2a_share)" -v ar="$(summary "$f" allreduce_ms)" -v rs="$(summary "$f" allreduce_share)" \
    -v imb="$(summary "$f" imbalance)" -v dr="$(summary "$f" dropped)" \
    'BEGIN { printf "| %s | %.4f | %.2f | %.2f (%.0f %%) | %.2f (%.0f %%) | %.2f | %.1f %% |\n", w, acc, st, a2a, 100*as, ar, 100*rs, imb, 100*dr }'
}
echo "| run | test accuracy | step ms | all-to-all ms (share) | AllReduce ms (share) | imbalance | dropped |"
echo "|---|---|---|---|---|---|---|"
"$out/goccl" run -np "$NP" "$out/moe" -epochs "$EPOCHS" -experts 0 >"$out/dense" 2>&1 || { cat "$out/dense"; exit 1; }
row "dense FFN, $NP ranks, 1 host" "$out/dense"
"$out/goccl" run -np "$NP" "$out/moe" -epochs "$EPOCHS" >"$out/moe1" 2>&1 || { cat "$out/moe1"; exit 1; }
row "8 experts top 2, $NP ranks, 1 host" "$out/moe1"
if [ "$(id -u)" != 0 ]; then
  echo "moe-bench: 2-host row skipped: goccl cluster needs root" >&2
  exit 0
fi
L=$((NP / 2))
"$out/goccl" cluster up --hosts 2 --bw "$RATE" --name "$name" --slots "$L" >/dev/null
"$out/goccl" run -H "$name-h0:$L,$name-h1:$L" --rsh "$out/goccl cluster rsh" \
  "$out/moe" -epochs "$EPOCHS" >"$out/moe2" 2>&1 || { cat "$out/moe2"; exit 1; }
row "8 experts top 2, 2 hosts × $L ranks, $RATE links" "$out/moe2"
