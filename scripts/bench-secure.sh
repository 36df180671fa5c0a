#!/usr/bin/env bash
# Cost of the TCP link options: 2-rank all_reduce over TCP (GOCCL_SHM_DISABLE=1)
# plain, with GOCCL_CHECKSUM=1, with GOCCL_TLS=1 and with both, the
# configurations interleaved REPEAT times (default 5); prints the median
# out-of-place time (us) and busbw (GB/s) per size and configuration.
set -euo pipefail
cd "$(dirname "$0")/.."
REPEAT=${REPEAT:-5}
ITERS=${ITERS:-20}
go build -o /tmp/goccl-bench-secure ./cmd/goccl
out=$(mktemp -d)
configs=(plain checksum tls tls+checksum)
envs=("" "GOCCL_CHECKSUM=1" "GOCCL_TLS=1" "GOCCL_TLS=1 GOCCL_CHECKSUM=1")
echo "# $(date -u +%FT%TZ) $(uname -r) $(nproc) cpus: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "# $(go version); goccl $(git rev-parse --short HEAD)$(git diff --quiet || echo -dirty)"
for rep in $(seq "$REPEAT"); do
  for i in "${!configs[@]}"; do
    env GOCCL_SHM_DISABLE=1 GOCCL_JOB_TOKEN=bench-secure-token ${envs[$i]} \
      /tmp/goccl-bench-secure perf all_reduce -np 2 -a 3 -z 2 -b 8 -e 128M -f 8 -n "$ITERS" -w 5 -c 0 \
      > "$out/${configs[$i]}.$rep"
  done
done
python3 - "$out" "$REPEAT" "${configs[@]}" <<'PY'
import sys, statistics, glob
out, repeat, configs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
data = {}
for c in configs:
    for r in range(1, repeat + 1):
        for line in open(f"{out}/{c}.{r}"):
            f = line.split()
            if len(f) >= 8 and f[0].isdigit() and f[2] == "float":
                data.setdefault((int(f[0]), c), []).append((float(f[5]), float(f[7])))
sizes = sorted({s for s, _ in data})
print("| bytes | " + " | ".join(f"{c} time µs / busbw GB/s" for c in configs) + " | " + " | ".join(f"{c} vs plain" for c in configs[1:]) + " |")
print("|---:|" + "---:|" * (2 * len(configs) - 1))
for s in sizes:
    med = {c: (statistics.median(t for t, _ in data[(s, c)]), statistics.median(b for _, b in data[(s, c)])) for c in configs}
    cells = [f"{med[c][0]:.1f} / {med[c][1]:.2f}" for c in configs]
    ratios = [f"{med[c][0] / med['plain'][0]:.2f}× time" for c in configs[1:]]
    print(f"| {s} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
PY
