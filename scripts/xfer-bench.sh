#!/usr/bin/env bash
# The xfer agent beside UCX in one run on this machine: `goccl xferbench`
# (initiator here, target in a child process) over TCP, shared memory and
# soft RoCE, WRITE and READ of one block per request at 1-64 MiB, the soft
# RoCE device's own write-bw and read-bw (its ceiling), then UCX's
# ucx_perftest between two processes over the same transports: UCP put
# (ucp_put_bw, one outstanding: NIXL's UCX backend path) and get (ucp_get),
# and UCT's zero-copy put over TCP (put_bw -x tcp -D zcopy), the fastest
# one-sided path UCX has on TCP. UCX's "MB/s" is MiB/s: converted to GB/s
# (1e9 bytes) here. Each figure is one run; the machine is noisy, so the
# script runs REPEAT rounds and prints every one.
#
# Usage: scripts/xfer-bench.sh [REPEAT (1)]   needs ucx_perftest (Debian ucx-utils)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
REPEAT=${1:-1}
out=$(mktemp -d /tmp/xfer-bench.XXXXXX)
trap 'rm -rf "$out"' EXIT
go build -o "$out/goccl" ./cmd/goccl
command -v ucx_perftest >/dev/null || { echo "ucx_perftest not found: apt-get install ucx-utils" >&2; exit 1; }
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs, $(go version | cut -d' ' -f3), UCX $(ucx_info -v | sed -n 's/^# Version //p')"

port=13600
# ucx_bw ARGS...: one ucx_perftest client/server pair; prints GB/s.
ucx_bw() {
  port=$((port + 1))
  ucx_perftest -p "$port" >/dev/null 2>&1 &
  local sp=$!
  for _ in $(seq 50); do ss -ltnH "sport = :$port" | grep -q . && break; sleep 0.1; done
  local line
  line=$(timeout 60 ucx_perftest 127.0.0.1 -p "$port" -f -v "$@" 2>/dev/null | tail -1 || true)
  kill "$sp" 2>/dev/null || true
  wait "$sp" 2>/dev/null || true
  echo "$line" | awk -F, 'NF==8 {printf "%.3f", $6*1048576/1e9; ok=1} END {if (!ok) printf "-"}'
}
iters() { case $1 in 1048576) echo "$2";; 4194304) echo $(($2 / 4));; 16777216) echo $(($2 / 16));; *) echo $(($2 / 64 > 4 ? $2 / 64 : 4));; esac; }

for round in $(seq "$REPEAT"); do
  echo "## round $round"
  for be in tcp shm roce; do
    for op in WRITE READ; do
      echo "### goccl xferbench --backend $be --op $op (GB/s)"
      "$out/goccl" xferbench --backend "$be" --op "$op" -b 1M -e 64M -n 400 --check | awk 'NR>3 && $1 ~ /^[0-9]/ {printf "%s %s\n", $1, $3} /check/'
    done
  done
  echo "### goccl roce write-bw / read-bw: the soft RoCE device's own ceiling (perftest's ib_write_bw / ib_read_bw; GB/s)"
  echo "size write-bw read-bw"
  for s in 1048576 4194304 16777216 67108864; do
    n=$((512 * 1048576 / s))
    line="$s"
    for t in write-bw read-bw; do
      port=$((port + 1))
      "$out/goccl" roce $t -s $s -n $n -p $port >/dev/null 2>&1 &
      sleep 0.3
      # perftest's columns: #bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate; MB = 2^20 bytes
      bw=$("$out/goccl" roce $t -s $s -n $n -p $port 127.0.0.1 | awk '$1 ~ /^[0-9]+$/ {printf "%.3f", $4*1048576/1e9}')
      wait
      line="$line ${bw:--}"
    done
    echo "$line"
  done
  printf "### ucx_perftest (GB/s)\nsize tcp:ucp_put_bw tcp:ucp_get tcp:uct_put_zcopy posix:ucp_put_bw posix:ucp_get\n"
  for s in 1048576 4194304 16777216 67108864; do
    n=$(iters $s 400)
    ns=$(iters $s 8000)
    a=$(UCX_TLS=tcp UCX_NET_DEVICES=lo ucx_bw -t ucp_put_bw -s $s -n "$n" -w 2 -O 1)
    b=$(UCX_TLS=tcp UCX_NET_DEVICES=lo ucx_bw -t ucp_get -s $s -n "$n" -w 2)
    c=$(ucx_bw -t put_bw -x tcp -d lo -D zcopy -s $s -n "$n" -w 2)
    d=$(UCX_TLS=posix ucx_bw -t ucp_put_bw -s $s -n "$ns" -w 2)
    e=$(UCX_TLS=posix ucx_bw -t ucp_get -s $s -n "$ns" -w 2)
    echo "$s $a $b $c $d $e"
  done
done
