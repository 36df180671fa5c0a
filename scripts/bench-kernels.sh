#!/usr/bin/env bash
# Measures goccl's reduction kernels (internal/reduce, the implementation this
# CPU selects) on 64 MiB arrays beside C's `y[i] += x[i]` on float32
# (gcc -O3 -march=native) in the same run, and prints a markdown table with
# each kernel's rate as a fraction of the C figure (issue 3 asks for >= 80 %).
# Rates are bytes of the destination per second (GB = 1e9), medians of REPEAT
# runs of COUNT iterations each.
#
# Usage: scripts/bench-kernels.sh        Environment: REPEAT (5), COUNT (20)
set -euo pipefail
cd "$(dirname "$0")/.."
REPEAT=${REPEAT:-5} COUNT=${COUNT:-20}
export PATH="$PATH:/usr/local/go/bin"
out=$(mktemp -d /tmp/goccl-kernels.XXXXXX)

cat > "$out/yx.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void add(float *restrict y, const float *restrict x, size_t n) { for (size_t i = 0; i < n; i++) y[i] += x[i]; }
int main(int argc, char **argv) {
  size_t bytes = 64u << 20, n = bytes / sizeof(float);
  int iters = argc > 1 ? atoi(argv[1]) : 20;
  float *y = aligned_alloc(64, bytes), *x = aligned_alloc(64, bytes);
  for (size_t i = 0; i < n; i++) { y[i] = 1.0f + (float)(i % 7); x[i] = 1.0f / (float)(1 + i % 5); }
  add(y, x, n); /* warm-up: page faults */
  double t0 = now();
  for (int i = 0; i < iters; i++) { add(y, x, n); __asm__ volatile("" ::"r"(y) : "memory"); }
  double t = (now() - t0) / iters;
  printf("%.1f\n", bytes / t / 1e6); /* MB/s of y, like go test -bench's SetBytes */
  return y[n / 2] == 0.0f;
}
C
if command -v gcc >/dev/null 2>&1; then
  gcc -O3 -march=native -o "$out/yx" "$out/yx.c"
else
  echo "# gcc not found: no C reference" >&2
fi

# The fastest implementation this CPU runs (the one goccl selects).
impl=generic
for i in avx2 avx512; do
  probe=$(go test ./internal/reduce -run '^$' -bench "Func/$i/256KiB/float/sum\$" -benchtime 1x 2>/dev/null || true)
  case "$probe" in *BenchmarkFunc*) impl=$i ;; esac
done
kernels='(int8|uint8|int32|uint32|int64|uint64)/sum$|(half|bfloat16|float|double)/(sum|min|max)$'
for rep in $(seq 1 "$REPEAT"); do
  [ -x "$out/yx" ] && "$out/yx" "$COUNT" >> "$out/c.txt"
  go test ./internal/reduce -run '^$' -bench "Func/$impl/64MiB/" -benchtime "${COUNT}x" 2>/dev/null |
    awk -v re="$kernels" '/^BenchmarkFunc/ { split($1, p, "/"); k = p[4] "/" p[5]; sub(/-[0-9]+$/, "", k); if (k ~ re) print k, $(NF-1) }' >> "$out/go.txt"
done

median() { sort -n | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
cref=""
[ -s "$out/c.txt" ] && cref=$(median < "$out/c.txt")
echo "### Reduction kernels, 64 MiB, implementation $impl, median of $REPEAT runs"
echo
[ -n "$cref" ] && printf 'C `y += x` float32 (gcc -O3 -march=native): %.2f GB/s\n\n' "$(echo "$cref / 1000" | bc -l)"
echo "| kernel | GB/s | vs C y += x |"
echo "|---|---:|---:|"
for k in $(awk '{print $1}' "$out/go.txt" | sort -u); do
  m=$(awk -v k="$k" '$1 == k {print $2}' "$out/go.txt" | median)
  if [ -n "$cref" ]; then
    printf '| %s | %.2f | %.0f %% |\n' "$k" "$(echo "$m / 1000" | bc -l)" "$(echo "100 * $m / $cref" | bc -l)"
  else
    printf '| %s | %.2f | – |\n' "$k" "$(echo "$m / 1000" | bc -l)"
  fi
done
rm -rf "$out"
