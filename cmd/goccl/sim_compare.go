package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/goccl/goccl/sim"
)

// runSimCompare predicts one collective on two topologies, side by side.
func runSimCompare(name string, args []string, stdout, stderr io.Writer) int {
	fs := simFlags(name, stderr)
	ranks := fs.Int("ranks", 0, "ranks taking part on each (0: the GPUs of the smaller topology)")
	collName := fs.StringP("collective", "c", "all_reduce", "all_reduce, all_gather, reduce_scatter, broadcast, reduce, alltoall or sendrecv")
	sizes := perfConfig{minBytes: 1 << 20, maxBytes: 8 << 30, stepFactor: 8, stepBytes: 1 << 20}
	fs.VarP(sizeValue{&sizes.minBytes}, "minbytes", "b", "smallest size (K, M, G, T: 1024-based)")
	fs.VarP(sizeValue{&sizes.maxBytes}, "maxbytes", "e", "largest size")
	fs.Int64VarP(&sizes.stepFactor, "stepfactor", "f", 8, "multiply the size by this (> 1)")
	if status, exit := fs.parseOrExit(args); exit {
		return status
	}
	usageErr := simUsageErr(stderr, name, true)
	if fs.NArg() != 2 {
		return usageErr("want two topologies (a preset or a file, each with an optional @NODES: dgx-b200@9 nvl72), got %d", fs.NArg())
	}
	var topos [2]*sim.Topology
	for i := range topos {
		t, err := simCompareTopology(fs.Arg(i))
		if err != nil {
			return usageErr("%v", err)
		}
		topos[i] = t
	}
	c, err := lookupColl(*collName)
	if err != nil {
		return usageErr("-c: %v", err)
	}
	if sizes.minBytes < 1 || sizes.minBytes > sizes.maxBytes || sizes.stepFactor < 2 || simSizeCount(&sizes) > simMaxSizes {
		return usageErr("sizes -b %d -e %d -f %d: want 1 ≤ -b ≤ -e and -f ≥ 2", sizes.minBytes, sizes.maxBytes, sizes.stepFactor)
	}
	n := min(topos[0].GPUs(), topos[1].GPUs())
	if *ranks != 0 {
		if *ranks < 1 || *ranks > n {
			return usageErr("--ranks %d: want 1 to %d (the smaller topology's GPUs)", *ranks, n)
		}
		n = *ranks
	}
	var rows [2][]simRow
	for i, t := range topos {
		cfg := simCollectiveConfig{topo: t, coll: c, ranks: n, sizes: sizes}
		if rows[i], err = simPredict(&cfg); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return 1
		}
	}
	if err := writeSimCompare(stdout, c.name, n, topos, rows); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

// simCompareTopology reads "PRESET", "FILE" or either with "@NODES".
func simCompareTopology(spec string) (*sim.Topology, error) {
	base, nodes := spec, 0
	if i := strings.LastIndexByte(spec, '@'); i >= 0 {
		n, err := strconv.Atoi(spec[i+1:])
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q: @%s: want a node count of 1 or more", spec, spec[i+1:])
		}
		base, nodes = spec[:i], n
	}
	preset, file := base, ""
	if strings.ContainsAny(base, "/.") {
		preset, file = "", base
	}
	t, err := simTopology(preset, file, nodes)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", spec, err)
	}
	return t, nil
}

// writeSimCompare prints the two predictions per size and B's speed-up.
func writeSimCompare(w io.Writer, coll string, ranks int, topos [2]*sim.Topology, rows [2][]simRow) error {
	fmt.Fprintf(w, "# goccl sim compare: %s on %d ranks, predicted by the closed-form model\n", coll, ranks)
	for i, t := range topos {
		fmt.Fprintf(w, "# %c: %s\n", 'A'+i, simDescribe(t))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "size (B)\tA time (us)\tA busbw (GB/s)\tA algo\tB time (us)\tB busbw (GB/s)\tB algo\tA time / B time")
	for k := range rows[0] {
		a, b := rows[0][k].Res, rows[1][k].Res
		fmt.Fprintf(tw, "%d\t%.4g\t%.4g\t%s\t%.4g\t%.4g\t%s\t%.3g\n", rows[0][k].Size,
			a.TimeUs, a.BusBW, simAlgoName(a), b.TimeUs, b.BusBW, simAlgoName(b), a.TimeUs/b.TimeUs)
	}
	return tw.Flush()
}

func simAlgoName(r sim.Result) string {
	if r.Proto == "" {
		return r.Algo
	}
	return r.Algo + "/" + r.Proto
}
