#!/usr/bin/env bash
# Small-message AllReduce latency, goccl against OpenMPI, 2 ranks on this
# host over shared memory, side by side in one run: the distribution of
# single operations (median, p90, p99), which a mean over iterations hides.
# goccl: examples/latency (goccl run -np 2); OpenMPI 4.1:
# scripts/peers/mpi_coll_perf.c -p 1 (--mca btl self,vader), which times
# each call the same way (rank 0's time of each blocking operation). The
# two alternate run by run; every cell is the median over REPEAT runs.
#
# Usage: scripts/latency-vs-mpi.sh        (sizes 8-512 B x4, 20,000 iterations, REPEAT 5)
# Environment: MINB (8), MAXB (512), FACTOR (4), ITERS (20000), WARMUP (2000),
#              REPEAT (5), PEERS (scripts/peers), OUT (a scratch directory).
set -euo pipefail
cd "$(dirname "$0")/.."
MINB=${MINB:-8} MAXB=${MAXB:-512} FACTOR=${FACTOR:-4} ITERS=${ITERS:-20000} WARMUP=${WARMUP:-2000} REPEAT=${REPEAT:-5}
PEERS=${PEERS:-scripts/peers}
OUT=${OUT:-$(mktemp -d /tmp/goccl-latency.XXXXXX)}
mkdir -p "$OUT"
export PATH="$PATH:/usr/local/go/bin"
if ! command -v mpicc >/dev/null 2>&1 || ! command -v mpirun >/dev/null 2>&1; then
  echo "skipping: mpicc/mpirun (Debian openmpi-bin libopenmpi-dev) not found" >&2
  exit 0
fi
go build -o "$OUT/goccl" ./cmd/goccl
go build -o "$OUT/latency" ./examples/latency
mpicc -O2 -o "$OUT/mpi_coll_perf" "$PEERS/mpi_coll_perf.c"

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); Linux $(uname -r)"
echo "# goccl $(git rev-parse --short HEAD 2>/dev/null || echo '?') built with $(go version | awk '{print $3}'), $(mpirun --version 2>/dev/null | head -1)"
echo "# AllReduce float32 sum, 2 ranks, shared memory; sizes $MINB-$MAXB x$FACTOR, $ITERS timed operations after $WARMUP; median of $REPEAT runs"
for rep in $(seq 1 "$REPEAT"); do
  "$OUT/goccl" run -np 2 "$OUT/latency" -op allreduce -b "$MINB" -e "$MAXB" -f "$FACTOR" -n "$ITERS" |
    sed 's/^\[0\] //' | grep -E '^ +[0-9]' > "$OUT/goccl.$rep"
  mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl self,vader "$OUT/mpi_coll_perf" -c all_reduce \
    -b "$MINB" -e "$MAXB" -f "$FACTOR" -n "$ITERS" -w "$WARMUP" -p 1 2>/dev/null | grep -E '^ +[0-9]' > "$OUT/mpi.$rep"
done

echo
echo "| size (B) | goccl p50 µs | OpenMPI p50 µs | goccl / OpenMPI | goccl p99 µs | OpenMPI p99 µs | goccl p99 / p50 | OpenMPI p99 / p50 |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
/usr/bin/python3 - "$OUT" "$REPEAT" <<'EOF'
import statistics, sys
out, rep = sys.argv[1], int(sys.argv[2])
def load(name):
    rows = {}
    for r in range(1, rep + 1):
        for line in open(f"{out}/{name}.{r}"):
            f = line.split()
            rows.setdefault(int(f[0]), []).append((float(f[2]), float(f[4])))
    return {s: (statistics.median(p for p, _ in v), statistics.median(q for _, q in v)) for s, v in rows.items()}
g, m = load("goccl"), load("mpi")
for s in sorted(g):
    if s not in m:
        continue
    (g50, g99), (m50, m99) = g[s], m[s]
    print(f"| {s} | {g50:.2f} | {m50:.2f} | {g50 / m50:.2f}× | {g99:.2f} | {m99:.2f} | {g99 / g50:.2f} | {m99 / m50:.2f} |")
EOF
echo "# raw outputs in $OUT" >&2
