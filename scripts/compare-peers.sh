#!/usr/bin/env bash
# Runs goccl perf and the peer benchmarks (OpenMPI 4.1 through
# scripts/peers/mpi_coll_perf.c, PyTorch Gloo through
# scripts/peers/gloo_coll_perf.py) side by side in one run, 2 ranks, and
# prints one markdown table per collective with ratio columns. A peer that
# is not installed, or lacks the collective (Gloo's reduce_scatter in torch
# 1.13), is skipped with a message.
#
# The header names the CPU and measures this machine's two ceilings in the
# same run: one core's memory copy (Go's copy of 64 MiB, past any cache:
# internal/memcpy BenchmarkCopy) and TCP loopback (two iperf3 streams at
# once, one per direction, the mean rate); the last two columns are
# goccl's busbw as a fraction of them (a 2-rank AllReduce moves its size
# once each way per rank, so its busbw is at most the per-direction rate).
#
# Usage: scripts/compare-peers.sh [COLL...]     (default: all_reduce)
#        QUICK=1 scripts/compare-peers.sh       (about a minute: run it before
#              stopping when a change touches a hot path; sizes 8 B-128 MiB
#              x16, 5,000 / 10 iterations, median of 3 runs, no Gloo)
# Environment: MINB (8), MAXB (128M), FACTOR (4), REPEAT (1: runs per
#              configuration; the table shows medians), sizes up to SPLIT
#              (1M) run ITERS_SMALL (500) timed iterations after WARMUP_SMALL
#              (50), larger ones ITERS (20) after WARMUP (5): a few slow
#              iterations (a descheduled rank) dominate a short mean of
#              microsecond operations; PEERS (scripts/peers: the
#              directory of the peer programs), OUT (a scratch directory),
#              Z (2: goccl perf -z 2, blocking operations as the peers time
#              them; 0: goccl perf's default, every operation of a size
#              issued non-blocking and waited for at the end); GOCCL (a
#              goccl binary to run instead of building this tree: an
#              earlier commit's build), BASE (a second goccl binary, e.g.
#              the build before a change: run in every repetition right
#              after goccl, in columns of its own with goccl / BASE
#              ratios, so that before and after share the VM's phase).
# busbw follows nccl-tests (doc/PERFORMANCE.md); GB = 1e9.
set -euo pipefail
cd "$(dirname "$0")/.."
colls=("$@")
[ ${#colls[@]} -gt 0 ] || colls=(all_reduce)
if [ "${QUICK:-0}" = 1 ]; then
  : "${FACTOR:=16}" "${ITERS_SMALL:=5000}" "${WARMUP_SMALL:=200}" "${ITERS:=10}" "${WARMUP:=3}" "${REPEAT:=3}" "${NO_GLOO:=1}"
fi
MINB=${MINB:-8} MAXB=${MAXB:-128M} FACTOR=${FACTOR:-4} ITERS=${ITERS:-20} WARMUP=${WARMUP:-5} REPEAT=${REPEAT:-1}
Z=${Z:-2}
SPLIT=${SPLIT:-1M} ITERS_SMALL=${ITERS_SMALL:-500} WARMUP_SMALL=${WARMUP_SMALL:-50}
PEERS=${PEERS:-scripts/peers}
OUT=${OUT:-$(mktemp -d /tmp/goccl-compare.XXXXXX)}
mkdir -p "$OUT"
export PATH="$PATH:/usr/local/go/bin"

if [ -n "${BASE:-}" ]; then
  cp "$BASE" "$OUT/goccl-base"
fi
if [ -n "${GOCCL:-}" ]; then
  cp "$GOCCL" "$OUT/goccl"
  goccl_version="binary $GOCCL"
else
  go build -o "$OUT/goccl" ./cmd/goccl
  goccl_version=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
fi
have_mpi=0
if command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 && [ -f "$PEERS/mpi_coll_perf.c" ]; then
  mpicc -O2 -o "$OUT/mpi_coll_perf" "$PEERS/mpi_coll_perf.c" -lm && have_mpi=1
else
  echo "# skipping OpenMPI: mpicc/mpirun (Debian openmpi-bin libopenmpi-dev) or $PEERS/mpi_coll_perf.c not found" >&2
fi
have_gloo=0
if [ "${NO_GLOO:-0}" = 1 ]; then
  echo "# skipping Gloo: NO_GLOO=1 (QUICK=1 sets it)" >&2
elif [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import torch' >/dev/null 2>&1 && [ -f "$PEERS/gloo_coll_perf.py" ]; then
  have_gloo=1
else
  echo "# skipping Gloo: /usr/bin/python3 with torch (Debian python3-torch) or $PEERS/gloo_coll_perf.py not found" >&2
fi

bytes() { # 8, 64K, 128M -> bytes
  local v=${1%[KkMmGg]} m=1
  case "$1" in *[Kk]) m=1024 ;; *[Mm]) m=1048576 ;; *[Gg]) m=1073741824 ;; esac
  echo $((v * m))
}
# Two size ranges on the same grid MINB * FACTOR^k: up to SPLIT, and above.
lo=$(bytes "$MINB") hi=$(bytes "$MAXB") split=$(bytes "$SPLIT")
last=$lo
while [ $((last * FACTOR)) -le "$split" ] && [ $((last * FACTOR)) -le "$hi" ]; do last=$((last * FACTOR)); done
ranges=("$lo $last $ITERS_SMALL $WARMUP_SMALL")
[ $((last * FACTOR)) -le "$hi" ] && ranges+=("$((last * FACTOR)) $hi $ITERS $WARMUP")
mpirun_() { mpirun --allow-run-as-root --oversubscribe -np 2 "$@"; }

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); Linux $(uname -r)"
echo "# goccl $goccl_version built with $(go version | awk '{print $3}')$([ $have_mpi = 1 ] && echo ", $(mpirun --version 2>/dev/null | head -1)")$([ $have_gloo = 1 ] && echo ", torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null) (Gloo)")"
[ -n "${BASE:-}" ] && echo "# base: binary $BASE (columns goccl shm/tcp (base))"
echo "# sizes $MINB-$MAXB x$FACTOR; up to $SPLIT: -n $ITERS_SMALL -w $WARMUP_SMALL, above: -n $ITERS -w $WARMUP; median of $REPEAT run(s); goccl perf -a 3 -z $Z"
# The ceilings, GB/s (1e9 bytes/s).
copy_gbs=$(go test -run XXX -bench 'Copy/65536KiB/builtin$' -benchtime 20x ./internal/memcpy 2>/dev/null |
  awk '/MB\/s/ { for (i = 1; i < NF; i++) if ($(i+1) == "MB/s") printf "%.2f", $i / 1000 }')
echo "# ceiling, memory copy on one core (copy of 64 MiB): ${copy_gbs:-?} GB/s"
tcp_gbs=
if command -v iperf3 >/dev/null 2>&1; then
  # Two client/server pairs at once, one stream each: one per direction of
  # a rank pair (one iperf3 process runs all its streams on one thread).
  iport=$((5300 + RANDOM % 500))
  for k in 0 1; do iperf3 -s -1 -p $((iport + k)) >/dev/null 2>&1 & done
  sleep 0.5
  for k in 0 1; do iperf3 -c 127.0.0.1 -p $((iport + k)) -t 3 -J > "$OUT/iperf3.$k.json" 2>/dev/null & done
  wait
  tcp_gbs=$(/usr/bin/python3 -c '
import json, sys
r = [json.load(open(f))["end"]["sum_received"]["bits_per_second"] for f in sys.argv[1:]]
print("%.2f" % (sum(r) / len(r) / 8e9))' "$OUT/iperf3.0.json" "$OUT/iperf3.1.json" 2>/dev/null) || true
  echo "# ceiling, TCP loopback per direction (two iperf3 streams at once, 3 s): ${tcp_gbs:-?} GB/s"
else
  echo "# skipping the TCP ceiling: iperf3 (Debian iperf3) not found" >&2
fi

for coll in "${colls[@]}"; do
  for rep in $(seq 1 "$REPEAT"); do
    for cfg in goccl-shm goccl-tcp mpi-shm mpi-tcp gloo base-shm base-tcp; do : > "$OUT/$coll.$cfg.$rep"; done
    for rg in "${ranges[@]}"; do
      read -r b e n w <<< "$rg"
      # -a 3 -z 2 (Z): the slowest rank's time of blocking operations, as the
      # peers' benchmarks measure them (goccl perf's defaults now follow
      # nccl-tests: -a 1, the mean over ranks; -z 0, non-blocking issue).
      args=(-b "$b" -e "$e" -f "$FACTOR" -n "$n" -w "$w")
      "$OUT/goccl" perf "$coll" -np 2 "${args[@]}" -a 3 -z "$Z" -c 1 >> "$OUT/$coll.goccl-shm.$rep"
      GOCCL_SHM_DISABLE=1 "$OUT/goccl" perf "$coll" -np 2 "${args[@]}" -a 3 -z "$Z" -c 1 >> "$OUT/$coll.goccl-tcp.$rep"
      if [ -n "${BASE:-}" ]; then
        "$OUT/goccl-base" perf "$coll" -np 2 "${args[@]}" -a 3 -z "$Z" -c 1 >> "$OUT/$coll.base-shm.$rep"
        GOCCL_SHM_DISABLE=1 "$OUT/goccl-base" perf "$coll" -np 2 "${args[@]}" -a 3 -z "$Z" -c 1 >> "$OUT/$coll.base-tcp.$rep"
      fi
      if [ $have_mpi = 1 ] && [ "$coll" != reduce ] && [ "$coll" != sendrecv ]; then
        mpirun_ --mca btl self,vader "$OUT/mpi_coll_perf" -c "$coll" "${args[@]}" >> "$OUT/$coll.mpi-shm.$rep" 2>/dev/null
        mpirun_ --mca btl self,tcp "$OUT/mpi_coll_perf" -c "$coll" "${args[@]}" >> "$OUT/$coll.mpi-tcp.$rep" 2>/dev/null
      fi
      if [ $have_gloo = 1 ] && [ "$coll" != reduce ] && [ "$coll" != sendrecv ]; then
        port=$((29500 + RANDOM % 1000))
        pids=()
        for r in 0 1; do
          MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=2 /usr/bin/python3 "$PEERS/gloo_coll_perf.py" \
            -c "$coll" "${args[@]}" > "$OUT/$coll.gloo.$rep.r$r" 2> "$OUT/$coll.gloo.$rep.r$r.err" &
          pids+=($!)
        done
        gloo_ok=1
        for p in "${pids[@]}"; do wait "$p" || gloo_ok=0; done
        if [ $gloo_ok = 1 ]; then
          cat "$OUT/$coll.gloo.$rep.r0" >> "$OUT/$coll.gloo.$rep"
        else
          echo "# skipping Gloo for $coll $b-$e: $(grep -h gloo_coll_perf "$OUT/$coll.gloo.$rep".r*.err | head -1)" >&2
        fi
        rm -f "$OUT/$coll.gloo.$rep".r*
      fi
    done
  done

  # One row per size: median time (us) and busbw (GB/s) of each configuration.
  echo
  place=out-of-place
  [ "$coll" = broadcast ] && place="in place (MPI_Bcast has one buffer)"
  echo "### $coll, 2 ranks, busbw GB/s (time µs), $place, median of $REPEAT run(s)"
  echo
  awk -v coll="$coll" -v out="$OUT" -v rep="$REPEAT" -v copyc="${copy_gbs:-}" -v tcpc="${tcp_gbs:-}" -v base="${BASE:+1}" '
    function median(a, n,   i, j, t) {
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    BEGIN {
      ncfg = split("goccl-shm mpi-shm goccl-tcp mpi-tcp gloo" (base ? " base-shm base-tcp" : ""), cfg, " ")
      for (c = 1; c <= ncfg; c++) for (r = 1; r <= rep; r++) {
        f = out "/" coll "." cfg[c] "." r
        while ((getline line < f) > 0) {
          if (line ~ /^#/ || line ~ /^[ \t]*$/) continue
          n = split(line, fld, " ")
          if (n < 9 || fld[1] !~ /^[0-9]+$/) continue
          s = fld[1]; sizes[s] = 1
          k = c SUBSEP s; cnt[k]++; bw[k, cnt[k]] = fld[8]; tm[k, cnt[k]] = fld[6]
          # MPI_Bcast and Gloo broadcast have one buffer (in place): compare
          # the in-place columns of goccl there.
          if (coll == "broadcast" && cfg[c] ~ /^(goccl|base)/ && n >= 12) { bw[k, cnt[k]] = fld[12]; tm[k, cnt[k]] = fld[10] }
        }
        close(f)
      }
      printf "| size (B) | goccl shm | OpenMPI shm | shm ratio | goccl tcp | OpenMPI tcp | tcp ratio | Gloo | goccl tcp / Gloo | shm / copy | tcp / iperf3 |%s\n",
        base ? " base shm | shm / base | base tcp | tcp / base |" : ""
      printf "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|%s\n", base ? "---:|---:|---:|---:|" : ""
      ns = 0; for (s in sizes) ss[++ns] = s + 0
      for (i = 1; i <= ns; i++) for (j = i + 1; j <= ns; j++) if (ss[j] < ss[i]) { t = ss[i]; ss[i] = ss[j]; ss[j] = t }
      for (i = 1; i <= ns; i++) {
        s = ss[i]
        for (c = 1; c <= ncfg; c++) {
          k = c SUBSEP s
          if (cnt[k] == 0) { B[c] = ""; T[c] = ""; continue }
          delete a; for (r = 1; r <= cnt[k]; r++) a[r] = bw[k, r] + 0; B[c] = median(a, cnt[k])
          delete a; for (r = 1; r <= cnt[k]; r++) a[r] = tm[k, r] + 0; T[c] = median(a, cnt[k])
        }
        line = sprintf("| %d", s)
        for (c = 1; c <= 5; c++) {
          line = line (B[c] == "" ? " | –" : sprintf(" | %.2f (%.1f)", B[c], T[c]))
          if (c == 2 || c == 4) line = line ratio(B[c-1], B[c], T[c-1], T[c])
        }
        line = line ratio(B[3], B[5], T[3], T[5]) frac(B[1], copyc) frac(B[3], tcpc)
        if (base) {
          line = line (B[6] == "" ? " | –" : sprintf(" | %.2f (%.1f)", B[6], T[6])) ratio(B[1], B[6], T[1], T[6])
          line = line (B[7] == "" ? " | –" : sprintf(" | %.2f (%.1f)", B[7], T[7])) ratio(B[3], B[7], T[3], T[7])
        }
        print line " |"
      }
    }
    # Fraction of a ceiling, for sizes where busbw is a bandwidth (≥ 1 MiB).
    function frac(g, c) {
      if (g == "" || c + 0 <= 0 || s < 1048576) return " | –"
      return sprintf(" | %.2f", g / c)
    }
    # Ratio goccl/peer: busbw ratio, or inverse time ratio when busbw rounds to 0.
    function ratio(g, p, tg, tp) {
      if (g == "" || p == "") return " | –"
      if (p + 0 >= 0.05 && g + 0 >= 0.05) return sprintf(" | %.2f×", g / p)
      if (tg + 0 > 0) return sprintf(" | %.2f× (time)", tp / tg)
      return " | –"
    }'
done
echo
echo "# raw outputs in $OUT" >&2
