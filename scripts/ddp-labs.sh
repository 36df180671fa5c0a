#!/usr/bin/env bash
# Experiments with package ddp on examples/ddp-mnist (built once; runs one
# after the other), printed as two markdown tables:
#
# (a) overlap at 2 and 4 ranks: one -overlap=ab run of STEPS steps per world
#     size (odd steps reduce the buckets during the backward pass, even ones
#     after it, so both settings see the same conditions): step time and the
#     time ddp's Wait was blocked (Stats.Exposed) per setting, and the step
#     time at world size 1 on the per-rank batch (global / N) beside it.
# (b) a sweep at SWEEP_NP ranks over EPOCHS full epochs, overlap on:
#     -bucket-mb 1, 5, 25, 100, then -compress fp16 and bf16 at the example's
#     default cap: buckets, step time, gradient bytes per step and final test
#     accuracy. SWEEP_NP is 2 by default: one rank per core on a 2-core
#     machine, so that differences in step time come from the communication
#     rather than from four processes taking turns on two cores (set
#     SWEEP_NP=4 where there are 4 cores).
#
# Each rank runs with GOMAXPROCS from PROCS / SWEEP_PROCS ("default": unset,
# Go's default, the number of CPUs). With GOMAXPROCS=1 the thread that runs
# the bucket AllReduces cannot run beside the compute goroutine, so overlap
# then hides nothing.
#
# Bytes per step is ddp.Stats.CommBytes: the gradient payload a rank hands to
# AllReduce per step (4 bytes per parameter, 2 with fp16/bf16). A ring
# AllReduce over P ranks sends about 2(P-1)/P times that per rank (and
# receives as much): the "ring wire" column.
#
# Usage: scripts/ddp-labs.sh
# Environment: STEPS (600), EPOCHS (1), BATCH (128, global), SWEEP_NP (2),
#              BUCKETS ("1 5 25 100"), PROCS ("default": GOMAXPROCS values
#              for (a)), SWEEP_PROCS ("default"), OUT (a scratch directory).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-600} EPOCHS=${EPOCHS:-1} BATCH=${BATCH:-128} SWEEP_NP=${SWEEP_NP:-2} BUCKETS=${BUCKETS:-1 5 25 100}
PROCS=${PROCS:-default} SWEEP_PROCS=${SWEEP_PROCS:-default}
unset GOMAXPROCS
OUT=${OUT:-$(mktemp -d /tmp/goccl-ddp-labs.XXXXXX)}
mkdir -p "$OUT"
export PATH="$PATH:/usr/local/go/bin"
go build -o "$OUT/goccl" ./cmd/goccl
go build -o "$OUT/ddp-mnist" ./examples/ddp-mnist

# summary FILE KEY: the value of KEY= on the summary line of a run's output.
summary() { sed -n 's/^\[0\] summary: //p' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
# buckets FILE: the number of gradient buckets the first line reports.
buckets() { sed -n 's/^\[0\] MLP .*; \([0-9]*\) gradient buckets.*/\1/p' "$1"; }

# run NAME GOMAXPROCS NP ARGS...: one run of the example (GOMAXPROCS
# "default": unset), its output kept in $OUT/NAME.
run() {
  local name=$1 procs=$2 np=$3
  shift 3
  echo "# $name: $np rank(s), GOMAXPROCS $procs, $*" >&2
  if [ "$procs" = default ]; then
    "$OUT/goccl" run -np "$np" "$OUT/ddp-mnist" "$@" > "$OUT/$name" 2>&1 || { cat "$OUT/$name" >&2; exit 1; }
  else
    GOMAXPROCS=$procs "$OUT/goccl" run -np "$np" "$OUT/ddp-mnist" "$@" > "$OUT/$name" 2>&1 || { cat "$OUT/$name" >&2; exit 1; }
  fi
  [ -n "$(summary "$OUT/$name" step_ms)" ] || { echo "ddp-labs: no summary line in $OUT/$name" >&2; exit 1; }
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "# goccl $(git rev-parse --short HEAD 2>/dev/null || echo '?') built with $(go version | awk '{print $3}') (default GOMAXPROCS $(nproc)); MLP 784-1024-256-10, Adam, global batch $BATCH"

# (a) overlap: one run per world size with -overlap=ab, whose odd steps
# reduce the buckets during the backward pass and even steps after it, so
# the two settings are measured under the same conditions (load, page
# cache, the other ranks' phase) and the difference is not run-to-run noise.
rows=()
for procs in $PROCS; do
  for np in 2 4; do
    per=$(( (BATCH + np - 1) / np ))
    run "base.$procs.$per" "$procs" 1 -steps "$STEPS" -batch "$per" -overlap=true
    base=$(summary "$OUT/base.$procs.$per" step_ms)
    f="$OUT/overlap.$procs.$np"
    run "${f##*/}" "$procs" "$np" -steps "$STEPS" -batch "$BATCH" -overlap=ab
    line=$(sed -n 's/^\[0\] exposed communication per step: //p' "$f")
    # "with overlap A ms (P% of S ms), without B ms (Q% of T ms)"
    read -r won pon son woff poff soff < <(echo "$line" | sed 's/[^0-9. ]//g' | awk '{ print $1, $2, $3, $4, $5, $6 }')
    rows+=("$(awk -v p="$procs" -v np="$np" -v b="$base" -v won="$won" -v pon="$pon" -v son="$son" -v woff="$woff" -v poff="$poff" -v soff="$soff" 'BEGIN {
      printf "| %d | %s | %.1f | %.2f (%.1f %%) | %.1f | %.2f (%.1f %%) | %.1f | %.0f %% |", np, p, son, won, pon, soff, woff, poff, b, 100 * (son - b) / son }')")
  done
done
echo
echo "### (a) overlap, one -overlap=ab run of $STEPS steps per row (steps alternate; means after 10 warm-up steps)"
echo
echo "| ranks | GOMAXPROCS | step ms, overlap | Wait blocked ms, overlap | step ms, no overlap | Wait blocked ms, no overlap | 1-rank compute ms | step - 1-rank compute, overlap |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"

# (b) buckets and compression.
rows=()
for cfg in $(for b in $BUCKETS; do echo "bucket-mb=$b"; done) compress=fp16 compress=bf16; do
  run "sweep.$cfg" "$SWEEP_PROCS" "$SWEEP_NP" -epochs "$EPOCHS" -batch "$BATCH" -overlap=true "-$cfg"
  f="$OUT/sweep.$cfg"
  rows+=("$(awk -v cfg="$cfg" -v p="$SWEEP_NP" -v nb="$(buckets "$f")" -v s="$(summary "$f" step_ms)" -v w="$(summary "$f" wait_ms)" \
    -v by="$(summary "$f" bytes_per_step)" -v a="$(summary "$f" accuracy)" 'BEGIN {
    sub("=", " ", cfg)
    printf "| %s | %d | %.1f | %.1f | %d | %d | %s |", cfg, nb, s, w, by, by * 2 * (p - 1) / p, a }')")
done
echo
echo "### (b) buckets and compression, $SWEEP_NP ranks, GOMAXPROCS $SWEEP_PROCS, overlap on, $EPOCHS epoch(s)"
echo
echo "| setting | buckets | step ms | Wait blocked ms | payload bytes/step | ring wire bytes/step/rank | test accuracy |"
echo "|---|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
echo
echo "# exposed = step ms - 1-rank compute ms (world size 1 on the per-rank batch); Wait blocked: ddp.Stats.Exposed."
echo "# raw outputs in $OUT" >&2
