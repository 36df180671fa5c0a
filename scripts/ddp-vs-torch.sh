#!/usr/bin/env bash
# Runs examples/ddp-mnist (goccl, package ddp) and scripts/torch_ddp_mnist.py
# (PyTorch DistributedDataParallel over Gloo) on the same model, data, global
# batch and step count, one run after the other, and prints one table of step
# time and exposed communication.
#
# Exposed communication (as issue 14 defines it) = step time at world size N
# minus the 1-rank compute time: the step time of the same model at world
# size 1 on the per-rank batch (global batch / N), measured the same way (the
# mean wall time of a whole step after a warm-up of 10 steps) for both
# frameworks. Every rank computes on THREADS (1) threads: PyTorch's ranks
# call torch.set_num_threads(THREADS) (Gloo communicates on threads of its
# own), goccl's run with GOMAXPROCS=THREADS (gonum's Gemm, which otherwise
# spreads over every core, and goccl's progress share them). On a 2-core
# machine 2 ranks then have a core each and 4 ranks two per core. Setting
# GOMAXPROCS overrides THREADS for goccl (GOMAXPROCS=2: the Go default here).
# With more ranks than cores the step is at least ranks/cores times the
# 1-rank compute, so that share of the "exposed" time is CPU sharing, not
# communication (4 ranks on 2 cores: at least half the step).
#
# With ZERO=1 both shard Adam's state (ZeRO-1): goccl runs
# examples/fsdp-mnist -stage 1 (gradients all-reduced, each rank updates its
# shard, the shards all-gathered), PyTorch torch_ddp_mnist.py -zero
# (ZeroRedundancyOptimizer over DDP: the updated partitions broadcast).
#
# Usage: scripts/ddp-vs-torch.sh
# Environment: ZERO (0), NPS ("2 4": world sizes), STEPS (100), BATCH (128, global),
#              THREADS (1), PYTHON (/usr/bin/python3, with torch),
#              OUT (a scratch directory for the builds and raw outputs).
set -euo pipefail
cd "$(dirname "$0")/.."
ZERO=${ZERO:-0} NPS=${NPS:-2 4} STEPS=${STEPS:-100} BATCH=${BATCH:-128} THREADS=${THREADS:-1}
GMP=${GOMAXPROCS:-$THREADS}
PYTHON=${PYTHON:-/usr/bin/python3}
OUT=${OUT:-$(mktemp -d /tmp/goccl-ddp-vs-torch.XXXXXX)}
mkdir -p "$OUT"
export PATH="$PATH:/usr/local/go/bin"

if ! "$PYTHON" -c 'import torch, numpy' >/dev/null 2>&1; then
  echo "ddp-vs-torch: $PYTHON cannot import torch and numpy (Debian: apt-get install python3-torch)" >&2
  exit 1
fi
go build -o "$OUT/goccl" ./cmd/goccl
go build -o "$OUT/ddp-mnist" ./examples/ddp-mnist
go build -o "$OUT/fsdp-mnist" ./examples/fsdp-mnist
goccl_job=("$OUT/ddp-mnist" -overlap=true) torch_args=() names=("goccl ddp" "PyTorch DDP (Gloo)")
if [ "$ZERO" = 1 ]; then
  goccl_job=("$OUT/fsdp-mnist" -stage 1) torch_args=(-zero) names=("goccl fsdp ZeRO-1" "PyTorch ZeroRedundancyOptimizer (Gloo)")
fi

# summary FILE KEY: the value of KEY= on the summary line of a run's output.
summary() { sed -n 's/^\(\[0\] \)\{0,1\}summary: //p' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

# run FRAMEWORK NP BATCH: one run; its output is kept in $OUT/FRAMEWORK.NP.BATCH.
run() {
  local f="$OUT/$1.$2.$3"
  echo "# $1, $2 rank(s), global batch $3, $STEPS steps" >&2
  if [ "$1" = goccl ]; then
    GOMAXPROCS=$GMP "$OUT/goccl" run -np "$2" "${goccl_job[@]}" -steps "$STEPS" -batch "$3" > "$f" 2>&1 || { cat "$f" >&2; exit 1; }
  else
    "$PYTHON" scripts/torch_ddp_mnist.py -np "$2" -steps "$STEPS" -batch "$3" -threads "$THREADS" "${torch_args[@]}" > "$f" 2>&1 || { cat "$f" >&2; exit 1; }
  fi
  [ -n "$(summary "$f" step_ms)" ] || { echo "ddp-vs-torch: no summary line in $f" >&2; cat "$f" >&2; exit 1; }
}

torch_version=$("$PYTHON" -c 'import torch; print(torch.__version__)')
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "# goccl $(git rev-parse --short HEAD 2>/dev/null || echo '?') built with $(go version | awk '{print $3}'), GOMAXPROCS=$GMP per rank; torch $torch_version (Gloo), $THREADS thread(s) per rank"
echo "# MLP 784-1024-256-10, Adam, global batch $BATCH, $STEPS steps (mean step time over the last $((STEPS - (STEPS / 2 < 10 ? STEPS / 2 : 10))))"
echo
rows=()
declare -A exposed
for np in $NPS; do
  per=$(( (BATCH + np - 1) / np )) # the largest shard
  for fw in goccl torch; do
    run "$fw" 1 "$per"
    run "$fw" "$np" "$BATCH"
    base=$(summary "$OUT/$fw.1.$per" step_ms)
    f="$OUT/$fw.$np.$BATCH"
    step=$(summary "$f" step_ms) acc=$(summary "$f" accuracy)
    wait_ms=$(summary "$f" wait_ms)
    exposed[$fw.$np]=$(awk -v s="$step" -v b="$base" 'BEGIN { printf "%.1f", s - b }')
    rows+=("$(awk -v fw="$fw" -v gname="${names[0]}" -v tname="${names[1]}" -v np="$np" -v per="$per" -v s="$step" -v b="$base" -v a="$acc" -v w="${wait_ms:--}" 'BEGIN {
      printf "| %s | %d | %d | %.1f | %.1f | %.1f | %.0f %% | %s | %s |", fw == "torch" ? tname : gname, np, per, s, b, s - b, 100 * (s - b) / s, w == "-" ? "–" : sprintf("%.1f", w), a }')")
  done
done
echo "| framework | ranks | per-rank batch | step ms | 1-rank compute ms | exposed ms | exposed % of step | Wait blocked ms | test accuracy |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
echo
for np in $NPS; do
  awk -v np="$np" -v g="${exposed[goccl.$np]}" -v t="${exposed[torch.$np]}" 'BEGIN {
    printf "%d ranks: goccl exposed / PyTorch exposed = %s\n", np, (t + 0 > 0 && g + 0 >= 0) ? sprintf("%.2f", g / t) : sprintf("n/a (goccl %s ms, PyTorch %s ms)", g, t) }'
done
echo
echo "# exposed = step ms - 1-rank compute ms (the same model at world size 1 on the per-rank batch);"
echo "# Wait blocked: goccl's ddp.Stats.Exposed (fsdp.Stats.Exposed with ZERO=1), the time it waited on collectives (waiting for slower ranks included)."
echo "# raw outputs in $OUT" >&2
