#!/usr/bin/env bash
# Measures goccl's collectives on namespace clusters (goccl cluster up) and
# writes them as validation rows for goccl sim validate, with a calibration
# measured separately (goccl sim calibrate: send/recv only, never the
# collectives compared).
#
# usage: scripts/sim-netns.sh DIR     (root and iproute2; about 15 minutes)
#   DIR/netns.csv        the measured rows (sim/testdata/netns.csv is one)
#   DIR/calibration.json the calibration (sim/testdata/netns-calibration.json)
# then: goccl sim validate --csv DIR/netns.csv --calibration DIR/calibration.json
#
# Shapes: hosts × ranks per host 2×1, 2×2, 4×2, 2×3; rates 1gbit (64 KiB to
# 128 MiB) and 100mbit (64 KiB to 16 MiB); every collective of goccl perf at
# the runtime's choice (algo "default") and all_reduce, all_gather,
# reduce_scatter forced flat (GOCCL_ALGO=ring). Times are out of place, µs,
# the slowest rank's (-a 3: the collective's time, which the model predicts;
# the default mean counts a root that only sends, done when its socket took
# the bytes).
set -euo pipefail
dir=${1:?usage: scripts/sim-netns.sh DIR}
mkdir -p "$dir"
bin=$(mktemp -d)
trap '"$bin/goccl" cluster down --name simval >/dev/null 2>&1 || true; rm -rf "$bin"' EXIT
go build -o "$bin/goccl" ./cmd/goccl
goccl=$bin/goccl
csv=$dir/netns.csv
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
{
	echo "# goccl's own collectives on namespace clusters, measured by scripts/sim-netns.sh on $cpu ($(nproc) logical CPUs)."
	echo "# time_us: goccl perf's out-of-place time of the slowest rank (-a 3); algo default = the runtime's choice, ring = GOCCL_ALGO=ring (flat)."
	echo "system,gpus,nodes,workload,algo,bytes,metric,value,source"
} >"$csv"

up() { # hosts rate
	"$goccl" cluster down --name simval >/dev/null 2>&1 || true
	"$goccl" cluster up --name simval --hosts "$1" --bw "$2" >/dev/null
}

up 2 1gbit
"$goccl" sim calibrate --cluster simval -e 64M -o "$dir/calibration.json"

for rate in 1gbit 100mbit; do
	max=128M
	[ "$rate" = 100mbit ] && max=16M
	for shape in "2 1" "2 2" "4 2" "2 3"; do
		read -r hosts per <<<"$shape"
		up "$hosts" "$rate"
		list=$(for i in $(seq 0 $((hosts - 1))); do printf 'simval-h%d:%d,' "$i" "$per"; done)
		list=${list%,}
		for coll in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv; do
			algos="default"
			case $coll in all_reduce | all_gather | reduce_scatter) algos="default ring" ;; esac
			for algo in $algos; do
				env=()
				[ "$algo" = ring ] && env=(--env GOCCL_ALGO=ring)
				echo "sim-netns: $rate ${hosts}x$per $coll $algo (load $(cut -d" " -f1 /proc/loadavg))" >&2
				# Once more after a failure: at 100mbit six ranks' alltoall
				# flows through one tbf queue have starved one TCP stream
				# past GOCCL_SOCKET_TIMEOUT (10 s of retransmission backoff).
				for try in 1 2; do
					"$goccl" run -H "$list" --rsh "$goccl cluster rsh" "${env[@]}" \
						"$goccl" perf "$coll" -b 64K -e "$max" -f 4 -n 3 -w 1 -a 3 -J "$bin/perf.json" >/dev/null && break
					[ "$try" = 2 ] && exit 1
					echo "sim-netns: $coll failed; once more" >&2
				done
				python3 - "$bin/perf.json" "$rate" "$((hosts * per))" "$hosts" "$coll" "$algo" >>"$csv" <<'PY'
import json, sys
path, rate, gpus, nodes, coll, algo = sys.argv[1:]
for r in json.load(open(path))["results"]:
    print(f"goccl-netns {rate},{gpus},{nodes},{coll} float sum,{algo},{r['size']},time_us,{r['out_of_place']['time']:.1f},scripts/sim-netns.sh")
PY
			done
		done
	done
done
"$goccl" sim validate --csv "$csv" --calibration "$dir/calibration.json"
