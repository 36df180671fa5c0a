package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/goccl/goccl/sim"
)

// simLevels are goccl sim collective's --level values.
var simLevels = []string{"closed", "flow"}

// simFlowConfig is the level of goccl sim collective's predictions and,
// at the flow level, the routing and the last (largest) size's report.
type simFlowConfig struct {
	level, routing string
	last           *sim.FlowReport
}

func (f *simFlowConfig) check() error {
	if !slices.Contains(simLevels, f.level) {
		return fmt.Errorf("--level %q: want one of %s", f.level, strings.Join(simLevels, ", "))
	}
	if !slices.Contains(sim.Routings, f.routing) {
		return fmt.Errorf("--routing %q: want one of %s", f.routing, strings.Join(sim.Routings, ", "))
	}
	return nil
}

// predict is c's prediction at the configured level.
func (f *simFlowConfig) predict(t *sim.Topology, c sim.Collective) (sim.Result, error) {
	if f.level != "flow" {
		return t.Collective(c)
	}
	res, rep, err := t.FlowCollective(c, sim.FlowOptions{Routing: f.routing, TopLinks: 5})
	f.last = rep
	return res, err
}

// describe names the model in the table's banner.
func (f *simFlowConfig) describe() string {
	if f.level != "flow" {
		return "the closed-form model"
	}
	return "the flow level (max-min fair flows on the topology graph, routing " + f.routing + ")"
}

// notes are the comment lines after a flow-level table: the largest
// size's busiest links and the flows that ended it.
func (f *simFlowConfig) notes() []string {
	if f.last == nil || len(f.last.Jobs) == 0 {
		return nil
	}
	j := f.last.Jobs[0]
	out := []string{fmt.Sprintf("flow level at %s: %d flows, %d max-min solves; latency %.1f us + transfer %.1f us",
		simSize(j.Bytes), f.last.Flows, f.last.Phases, j.LatencyUs, j.TransferUs), "busiest links (utilization over the transfer):"}
	for _, l := range f.last.Links {
		out = append(out, fmt.Sprintf("  %-40s %8.2f GB/s  %5.1f %%", l.Link, l.GBps, 100*l.Utilization))
	}
	out = append(out, fmt.Sprintf("critical path: %d flow(s) end last, e.g.:", j.Late))
	for _, c := range j.Critical {
		out = append(out, fmt.Sprintf("  gpu %d → gpu %d, %.0f bytes, held by %s", c.Src, c.Dst, c.Bytes, c.Bottleneck))
	}
	return out
}
