#!/usr/bin/env bash
# Soft RoCE vs the loopback baselines of issue 5, in one run: a single TCP
# stream (iperf3) against goccl roce write-bw at 1 MiB and 64 KiB, and UDP
# ping-pong latency (sockperf, 14 bytes, its minimum; half the round trip) against goccl roce
# write-lat at 8 bytes. REPEAT runs each (default 3); prints the medians.
# Needs iperf3 and sockperf (Debian packages of those names).
set -euo pipefail
cd "$(dirname "$0")/.."
REPEAT=${REPEAT:-3}
go build -o /tmp/goccl-bench-roce ./cmd/goccl
G=/tmp/goccl-bench-roce
echo "# $(date -u +%FT%TZ) $(uname -r) $(nproc) cpus: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "# $(go version); goccl $(git rev-parse --short HEAD)$(git diff --quiet || echo -dirty); $(iperf3 --version | head -1); sockperf $(sockperf --version 2>&1 | grep -o 'version [0-9.]*' | head -1)"
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
goccl_pair() { # tool args...: server then client on loopback; prints the client's output
  local port=$((20000 + RANDOM % 20000))
  $G roce "$1" -p $port -dev-port 0 "${@:2}" >/dev/null &
  local srv=$!
  local out=""
  for _ in $(seq 50); do
    if out=$($G roce "$1" -p $port "${@:2}" 127.0.0.1 2>/dev/null); then break; fi
    sleep 0.1
  done
  wait $srv || true
  echo "$out"
}
iperf3 -s -1 -D -p 5299 >/dev/null 2>&1 || true
tcp=(); wbw1m=(); wbw64k=(); udp=(); wlat=(); wlatavg=()
for r in $(seq "$REPEAT"); do
  iperf3 -s -1 -D -p 5299 >/dev/null 2>&1 || true
  sleep 0.3
  tcp+=("$(iperf3 -c 127.0.0.1 -p 5299 -t 3 -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8/2**20)')")
  wbw1m+=("$(goccl_pair write-bw -s 1M -n 2000 | awk '$1=="1048576"{print $4}')")
  wbw64k+=("$(goccl_pair write-bw -s 64K -n 20000 | awk '$1=="65536"{print $4}')")
  sockperf server -i 127.0.0.1 -p 11311 >/dev/null 2>&1 &
  sp=$!
  sleep 0.3
  udp+=("$(sockperf ping-pong -i 127.0.0.1 -p 11311 -m 14 -t 3 2>&1 | grep -o 'avg-latency=[0-9.]*' | cut -d= -f2)")
  kill $sp 2>/dev/null || true
  row=$(goccl_pair write-lat -s 8 -n 20000 | awk '$1=="8"{print $5, $6}')
  wlat+=("${row% *}")
  wlatavg+=("${row#* }")
done
m() { printf '%s\n' "$@" | median; }
echo "| measurement | value (median of $REPEAT) | runs |"
echo "|---|---:|---|"
echo "| TCP stream, iperf3, MB/s (2^20) | $(m "${tcp[@]}") | ${tcp[*]} |"
echo "| goccl roce write-bw 1 MiB, BW average MB/s | $(m "${wbw1m[@]}") | ${wbw1m[*]} |"
echo "| goccl roce write-bw 64 KiB, BW average MB/s | $(m "${wbw64k[@]}") | ${wbw64k[*]} |"
echo "| UDP ping-pong 14 B (sockperf's minimum), sockperf avg latency µs (half round trip) | $(m "${udp[@]}") | ${udp[*]} |"
echo "| goccl roce write-lat 8 B, t_typical µs (half round trip) | $(m "${wlat[@]}") | ${wlat[*]} |"
echo "| goccl roce write-lat 8 B, t_avg µs (half round trip) | $(m "${wlatavg[@]}") | ${wlatavg[*]} |"
