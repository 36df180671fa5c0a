package goccl

import (
	"fmt"
	"log/slog"

	"github.com/goccl/goccl/internal/algo"
	"github.com/goccl/goccl/internal/config"
)

// The choice of each collective's schedule is c.sel's (algo.Selector, over
// the schedule table of internal/algo); Init settles its facts as it
// learns them: GOCCL_ALGO and the direct threshold (fromEnv), the hosts
// (setupHier), the direct schedules (agreeDirect), the crossovers (tune)
// and the aggregation tree (setupCollNet).

// selectorFromEnv makes c.sel from GOCCL_ALGO and GOCCL_DIRECT_MIN_BYTES,
// Init's first facts.
func (c *Comm) selectorFromEnv() error {
	w, err := config.Algo.Word()
	if err != nil {
		return err
	}
	forced, err := algo.ParseForced(w)
	if err != nil {
		return fmt.Errorf("%s: %v", config.Algo.Name, err)
	}
	f := algo.Facts{Size: c.size, Forced: forced, DirectMin: algo.DirectMinBytes, Tuning: algo.FixedTuning()}
	if err := apply(&f.DirectMin, config.DirectMinBytes.Int); err != nil {
		return err
	}
	c.sel = algo.NewSelector(f)
	return nil
}

// setFacts makes c.sel anew from its facts changed by set.
func (c *Comm) setFacts(set func(f *algo.Facts)) {
	f := c.sel.Facts()
	set(&f)
	c.sel = algo.NewSelector(f)
}

// warnForced warns, on rank 0, when the AllReduce algorithm GOCCL_ALGO
// forces cannot run on this communicator, and what runs instead.
func (c *Comm) warnForced() {
	if r := c.sel.Unusable(); r != nil && c.rank == 0 {
		c.log.Warnf(subInit, "%s=%s cannot run on this communicator (it needs %s): AllReduce runs the tuner's choice, the other collectives their flat schedules",
			config.Algo.Name, r.Algo, r.Needs)
	}
}

// logAlgo reports, once per operation kind and schedule (bit: its index
// among the kind's, Schedule.Bit), which algorithm ran (GOCCL_DEBUG=INFO),
// and records it for the trace.
func (c *Comm) logAlgo(kind opKind, bit int, name algo.Algorithm, nbytes int) {
	c.recAlgo = string(name)
	if b := uint8(1) << bit; c.loggedOp[kind]&b == 0 && c.log.on(slog.LevelInfo, subColl) {
		c.loggedOp[kind] |= b
		c.log.log(slog.LevelInfo, subColl, []slog.Attr{slog.String("op", kind.String())},
			"%v uses %s (first use: %d bytes, %d ranks)", kind, name, nbytes, c.size)
	}
}

// setupHier gives the group and the selector the hierarchy from the ranks'
// host identities (none when every rank is on one host).
func (c *Comm) setupHier(hostKeys []string) error {
	h, err := algo.NewHier(c.group, hostKeys)
	if err != nil {
		return err
	}
	if h.Hosts > 1 {
		c.group.SetHier(h)
		c.setFacts(func(f *algo.Facts) { f.HostOf = h.HostOf })
		c.log.Infof(subInit, "init: %d hosts, %d ranks per host (0: uneven); this rank is local rank %d of host %d", h.Hosts, h.PerHost, h.LocalOf[c.rank], h.HostOf[c.rank])
	}
	return nil
}
