#!/usr/bin/env bash
# The cost of a Go rank in a PyTorch Gloo job: scripts/peers/
# gloo_coll_perf.py (torch's Gloo all_reduce, float32 sum, 2 ranks) run three
# ways in one run: both ranks Python; Python rank 0 and a Go rank 1 (package
# gloo, gloo/internal/glooperf, the same sequence of operations); both Go.
# Rank 0 prints each table (nccl-tests columns; busbw = algbw * 2(n-1)/n,
# GB = 1e9). REPEAT (1) runs each configuration that many times in turn.
#
# Usage: scripts/gloo-interop-bench.sh [-b 8] [-e 128M] [-f 4] [-n 20] [-w 5]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
PEERS=${PEERS:-scripts/peers} # the directory of gloo_coll_perf.py
REPEAT=${REPEAT:-1}
if ! /usr/bin/python3 -c 'import torch.distributed as d; assert d.is_gloo_available()' >/dev/null 2>&1 || [ ! -f "$PEERS/gloo_coll_perf.py" ]; then
  echo "skipped: needs /usr/bin/python3 with torch (Debian python3-torch) and $PEERS/gloo_coll_perf.py" >&2
  exit 0
fi
out=$(mktemp -d /tmp/gloo-interop.XXXXXX)
trap 'rm -rf "$out"' EXIT
go build -o "$out/glooperf" ./gloo/internal/glooperf
py=(/usr/bin/python3 "$PEERS/gloo_coll_perf.py" "$@")
go=("$out/glooperf" "$@")
export MASTER_ADDR=127.0.0.1 WORLD_SIZE=2 GLOO_SOCKET_IFNAME=lo
port=$((29600 + RANDOM % 200))
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs, $(/usr/bin/python3 -c 'import torch; print("torch", torch.__version__)'), $(go version | cut -d' ' -f3)"
for rep in $(seq "$REPEAT"); do
  for cfg in python+python python+go go+go; do
    port=$((port + 1))
    case $cfg in
      python+python) r0=("${py[@]}") r1=("${py[@]}") ;;
      python+go) r0=("${py[@]}") r1=("${go[@]}") ;;
      go+go) r0=("${go[@]}") r1=("${go[@]}") ;;
    esac
    echo "## ranks: $cfg (run $rep)"
    MASTER_PORT=$port RANK=1 "${r1[@]}" >"$out/r1.txt" 2>&1 &
    pid=$!
    MASTER_PORT=$port RANK=0 "${r0[@]}"
    wait $pid || { cat "$out/r1.txt"; exit 1; }
  done
done
