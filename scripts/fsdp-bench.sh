#!/usr/bin/env bash
# examples/fsdp-mnist at every ZeRO stage and as HSDP on NP ranks of this
# host, one run after the other, as a markdown table: final test accuracy,
# mean step time after 10 warm-up steps, the time blocked on collectives
# (fsdp.Stats.Exposed) and its share, the gradient and parameter bytes a
# rank hands to collectives per step, and the bytes a rank holds
# (fsdp.Memory) against the unsharded 16 bytes per parameter. As root, two
# more rows on 2 network-namespace hosts (goccl cluster up, links shaped to
# RATE) of NP/2 ranks each: ZeRO-3 sharded over all NP ranks, and HSDP
# sharded inside each host and replicated across the two. Then the memory
# alone (20 steps each) for the MLP and for one of even units
# (HIDDEN_EVEN) at 1, 2 and 4 ranks.
#
# Usage: scripts/fsdp-bench.sh [NP (4)] [EPOCHS (3)] [RATE (1gbit)]
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${1:-4} EPOCHS=${2:-3} RATE=${3:-1gbit} HIDDEN_EVEN=${HIDDEN_EVEN:-512,512,512,512,512,512}
out=$(mktemp -d /tmp/fsdp-bench.XXXXXX)
name=fb$$
trap '"$out/goccl" cluster down --name $name >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
export PATH="$PATH:/usr/local/go/bin"
go build -o "$out/goccl" ./cmd/goccl
go build -o "$out/fsdp-mnist" ./examples/fsdp-mnist
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $(go version | cut -d' ' -f3), $NP ranks, $EPOCHS epochs"
summary() { sed -n 's/^\[0\] summary: //p' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
echo "| stage | replicas | hosts | test accuracy | step ms | blocked ms (share) | bytes to collectives per step | bytes held per rank (of unsharded) |"
echo "|---|---|---|---|---|---|---|---|"
# row STAGE REPLICAS WHERE FILE
row() {
  awk -v st="$1" -v r="$2" -v where="$3" -v acc="$(summary "$4" accuracy)" -v s="$(summary "$4" step_ms)" -v w="$(summary "$4" wait_ms)" \
    -v b="$(summary "$4" bytes_per_step)" -v m="$(summary "$4" memory_bytes)" -v u="$(summary "$4" unsharded_bytes)" \
    'BEGIN { printf "| ZeRO-%s | %s | %s | %.4f | %.1f | %.1f (%.0f %%) | %d | %d (%.2f) |\n", st, r, where, acc, s, w, 100*w/s, b, m, m/u }'
}
for run in "1 1" "2 1" "3 1" "3 2"; do
  set -- $run
  f="$out/s$1r$2"
  "$out/goccl" run -np "$NP" "$out/fsdp-mnist" -epochs "$EPOCHS" -stage "$1" -replicate "$2" >"$f" 2>&1 || { cat "$f"; exit 1; }
  row "$1" "$2" "1 host" "$f"
done
if [ "$(id -u)" = 0 ]; then
  L=$((NP / 2))
  "$out/goccl" cluster up --hosts 2 --bw "$RATE" --name "$name" --slots "$L" >/dev/null
  for r in 1 2; do
    f="$out/h$r"
    "$out/goccl" run -H "$name-h0:$L,$name-h1:$L" --rsh "$out/goccl cluster rsh" \
      "$out/fsdp-mnist" -epochs "$EPOCHS" -stage 3 -replicate "$r" >"$f" 2>&1 || { cat "$f"; exit 1; }
    row 3 "$r" "2 hosts × $L, $RATE" "$f"
  done
else
  echo "fsdp-bench: the 2-host rows skipped: goccl cluster needs root" >&2
fi
echo
echo "| model | ranks | ZeRO-1 | ZeRO-2 | ZeRO-3 | unsharded |"
echo "|---|---|---|---|---|---|"
for hidden in 1024,256 "$HIDDEN_EVEN"; do
  for np in 1 2 4; do
    row="| 784-${hidden//,/-}-10 | $np |"
    for st in 1 2 3; do
      f="$out/m$st.$np"
      "$out/goccl" run -np "$np" "$out/fsdp-mnist" -steps 20 -stage "$st" -hidden "$hidden" >"$f" 2>&1 || { cat "$f"; exit 1; }
      row="$row $(awk -v m="$(summary "$f" memory_bytes)" -v u="$(summary "$f" unsharded_bytes)" 'BEGIN { printf "%d (%.2f)", m, m/u }') |"
    done
    echo "$row $(summary "$f" unsharded_bytes) |"
  done
done
