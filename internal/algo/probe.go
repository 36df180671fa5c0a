package algo

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Probe is how ProbeHier measures a link: Pings round trips of empty
// messages after an untimed one, then Transfers transfers of Bytes each
// answered by an empty message, after Warmups untimed ones (at least one).
// The fastest round trip counts, and the fastest transfer, or with Median
// the median one: interference (another process on the core, a page
// touched for the first time) only ever adds time, but over a network a
// token-bucket shaper that refilled while the link idled (a rank
// descheduled between two transfers) passes one transfer faster than its
// rate, which the median ignores. The untimed transfers open the TCP window
// (slow start) and then drain such a bucket, so that the timed ones see
// the link's sustained rate; over shared memory, several timed transfers
// reach ring slots that earlier ones have touched.
type Probe struct {
	Pings, Warmups, Transfers, Bytes int
	Median                           bool
}

func (p Probe) valid() bool { return p.Pings >= 1 && p.Transfers >= 1 && p.Bytes >= 1 }

// ProbeHier measures the two kinds of links of hierarchy h: the first rank
// of the first host (the lead; rank 0 in a communicator) probes its link to
// the next rank of its host with intra, then its link to the first rank of
// the second host with inter, while those two answer; the other ranks
// return at once. From the fastest round trip t0 and the transfer time t
// (see Probe), a link's cost is Alpha = t0/2 and Beta = (t − t0)/Bytes
// (t/Bytes if t is not above t0). On the lead, measured is true and c holds the
// measurements; elsewhere c is zero. h must be Hierarchical. Errors name
// the link, the step and the peer; after one the caller must abort the
// group (a transfer may be half done).
func (g *Group) ProbeHier(ctx context.Context, op *Op, h *Hierarchy, intra, inter Probe) (c Costs, measured bool, err error) {
	if !h.Hierarchical() {
		return c, false, fmt.Errorf("algo: no hierarchy to probe")
	}
	if !intra.valid() || !inter.valid() {
		return c, false, fmt.Errorf("algo: probes %+v and %+v need at least one of each", intra, inter)
	}
	lead, local, remote := h.rankAt(0, 0), h.rankAt(0, 1), h.rankAt(1, 0)
	switch g.Rank {
	case lead:
		if c.Intra, err = g.probeLink(ctx, op, local, "intra-host", intra); err != nil {
			return c, false, err
		}
		if c.Inter, err = g.probeLink(ctx, op, remote, "inter-host", inter); err != nil {
			return c, false, err
		}
		return c, true, nil
	case local:
		return c, false, g.answerProbe(ctx, op, lead, "intra-host", intra)
	case remote:
		return c, false, g.answerProbe(ctx, op, lead, "inter-host", inter)
	}
	return c, false, nil
}

// probeLink is the lead's side of a link's probe with peer.
func (g *Group) probeLink(ctx context.Context, op *Op, peer int, what string, p Probe) (LinkCost, error) {
	// timed is the sorted times of n exchanges of buf and an empty
	// answer, after warmups untimed ones.
	timed := func(warmups, n int, buf []byte, step string) ([]time.Duration, error) {
		times := make([]time.Duration, 0, n)
		for i := -max(1, warmups); i < n; i++ {
			start := time.Now()
			if err := g.sendRecv(ctx, op, peer, buf, peer, nil, false); err != nil {
				return nil, probeErr(what, step, peer, err)
			}
			if i >= 0 {
				times = append(times, time.Since(start))
			}
		}
		slices.Sort(times)
		return times, nil
	}
	rtts, err := timed(1, p.Pings, nil, "round trip")
	if err != nil {
		return LinkCost{}, err
	}
	transfers, err := timed(p.Warmups, p.Transfers, g.Scratch(p.Bytes), transferStep(p))
	if err != nil {
		return LinkCost{}, err
	}
	t := transfers[0]
	if p.Median {
		t = transfers[(len(transfers)-1)/2]
	}
	return linkCost(rtts[0], t, p.Bytes), nil
}

// answerProbe is the other side of probeLink, with the lead.
func (g *Group) answerProbe(ctx context.Context, op *Op, lead int, what string, p Probe) error {
	answer := func(warmups, n int, buf []byte, step string) error {
		for i := -max(1, warmups); i < n; i++ {
			if err := g.recv(ctx, op, lead, buf, false); err != nil {
				return probeErr(what, step, lead, err)
			}
			if err := g.send(ctx, op, lead, nil); err != nil {
				return probeErr(what, step, lead, err)
			}
		}
		return nil
	}
	if err := answer(1, p.Pings, nil, "round trip"); err != nil {
		return err
	}
	return answer(p.Warmups, p.Transfers, g.Scratch(p.Bytes), transferStep(p))
}

func transferStep(p Probe) string { return fmt.Sprintf("transfer of %d bytes", p.Bytes) }

func probeErr(what, step string, peer int, err error) error {
	return &probeError{what: what, step: step, peer: peer, err: err}
}

// probeError is a failed step of a probe. Its message is made when read, so
// that the communicator can still complete a *transport.MismatchError it
// wraps (the names of the operations).
type probeError struct {
	what, step string
	peer       int
	err        error
}

func (e *probeError) Error() string {
	return fmt.Sprintf("tuner probe of the %s link, %s with rank %d: %v", e.what, e.step, e.peer, e.err)
}

func (e *probeError) Unwrap() error { return e.err }

// linkCost is a link's cost from its round-trip time and the time of a
// transfer of n bytes answered by an empty message.
func linkCost(rtt, transfer time.Duration, n int) LinkCost {
	c := LinkCost{Alpha: rtt.Seconds() / 2, Beta: (transfer - rtt).Seconds() / float64(n)}
	if transfer <= rtt {
		c.Beta = transfer.Seconds() / float64(n)
	}
	return c
}
