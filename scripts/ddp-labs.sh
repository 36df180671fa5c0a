#!/usr/bin/env bash
# Experiments with package ddp on examples/ddp-mnist (built once; runs one
# after the other), printed as two markdown tables:
#
# (a) overlap on and off at 2 and 4 ranks, STEPS steps each, with each rank's
#     GOMAXPROCS 1 and the Go default (the number of CPUs: gonum's Gemm then
#     spreads every rank over all the cores): step time, the time ddp's Wait
#     was blocked (Stats.Exposed), and the exposed communication as issue 14
#     defines it: step time minus the step time of the same model at world
#     size 1 on the per-rank batch (global / N), with the same GOMAXPROCS.
# (b) a sweep at SWEEP_NP ranks over EPOCHS full epochs, GOMAXPROCS=1 per
#     rank: -bucket-mb 1, 5, 25, 100, then -compress fp16 and bf16 at the
#     default cap: buckets, step time, gradient bytes per step and final test
#     accuracy. SWEEP_NP is 2 by default: one rank per core on a 2-core
#     machine, so that differences in step time come from the communication
#     rather than from four processes taking turns on two cores (set
#     SWEEP_NP=4 where there are 4 cores).
#
# Bytes per step is ddp.Stats.CommBytes: the gradient payload a rank hands to
# AllReduce per step (4 bytes per parameter, 2 with fp16/bf16). A ring
# AllReduce over P ranks sends about 2(P-1)/P times that per rank (and
# receives as much): the "ring wire" column.
#
# Usage: scripts/ddp-labs.sh
# Environment: STEPS (100), EPOCHS (1), BATCH (128, global), SWEEP_NP (2),
#              BUCKETS ("1 5 25 100"), PROCS ("1 default": GOMAXPROCS
#              values for (a)), OUT (a scratch directory).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-100} EPOCHS=${EPOCHS:-1} BATCH=${BATCH:-128} SWEEP_NP=${SWEEP_NP:-2} BUCKETS=${BUCKETS:-1 5 25 100}
PROCS=${PROCS:-1 default}
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

# (a) overlap.
rows=()
for procs in $PROCS; do
  for np in 2 4; do
    per=$(( (BATCH + np - 1) / np ))
    run "base.$procs.$per" "$procs" 1 -steps "$STEPS" -batch "$per"
    base=$(summary "$OUT/base.$procs.$per" step_ms)
    for ov in true false; do
      f="$OUT/overlap.$procs.$np.$ov"
      run "${f##*/}" "$procs" "$np" -steps "$STEPS" -batch "$BATCH" -overlap="$ov"
      rows+=("$(awk -v p="$procs" -v np="$np" -v ov="$ov" -v s="$(summary "$f" step_ms)" -v w="$(summary "$f" wait_ms)" -v b="$base" 'BEGIN {
        printf "| %d | %s | %s | %.1f | %.1f | %.1f | %.0f %% | %.1f | %.0f %% |", np, p, ov == "true" ? "on" : "off", s, b, s - b, 100 * (s - b) / s, w, 100 * w / s }')")
    done
  done
done
echo
echo "### (a) overlap, $STEPS steps (mean step after 10 warm-up steps)"
echo
echo "| ranks | GOMAXPROCS | overlap | step ms | 1-rank compute ms | exposed ms | exposed % | Wait blocked ms | Wait % |"
echo "|---:|---|---|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"

# (b) buckets and compression.
rows=()
for cfg in $(for b in $BUCKETS; do echo "bucket-mb=$b"; done) compress=fp16 compress=bf16; do
  run "sweep.$cfg" 1 "$SWEEP_NP" -epochs "$EPOCHS" -batch "$BATCH" "-$cfg"
  f="$OUT/sweep.$cfg"
  rows+=("$(awk -v cfg="$cfg" -v p="$SWEEP_NP" -v nb="$(buckets "$f")" -v s="$(summary "$f" step_ms)" -v w="$(summary "$f" wait_ms)" \
    -v by="$(summary "$f" bytes_per_step)" -v a="$(summary "$f" accuracy)" 'BEGIN {
    sub("=", " ", cfg)
    printf "| %s | %d | %.1f | %.1f | %d | %d | %s |", cfg, nb, s, w, by, by * 2 * (p - 1) / p, a }')")
done
echo
echo "### (b) buckets and compression, $SWEEP_NP ranks, GOMAXPROCS=1, $EPOCHS epoch(s)"
echo
echo "| setting | buckets | step ms | Wait blocked ms | payload bytes/step | ring wire bytes/step/rank | test accuracy |"
echo "|---|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
echo
echo "# exposed = step ms - 1-rank compute ms (world size 1 on the per-rank batch); Wait blocked: ddp.Stats.Exposed."
echo "# raw outputs in $OUT" >&2
