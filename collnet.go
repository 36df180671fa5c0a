package goccl

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/goccl/goccl/internal/algo"
	"github.com/goccl/goccl/internal/bootstrap"
	"github.com/goccl/goccl/internal/collnet"
	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/reduce"
	"github.com/goccl/goccl/transport/roce"
)

// ErrCollNet is wrapped by the error of an AllReduce that in-network
// aggregation (GOCCL_COLLNET_ENABLE=1) failed: an aggregation node died or
// refused the operation. The message names the node. The communicator is
// then unusable, as after any failed operation; a new one (Init, or Split
// of a healthy one) whose ranks cannot reach the tree runs on the links.
var ErrCollNet = collnet.ErrAggregation

// collNetKey is the store key of the tree's root address.
const collNetKey = "goccl/collnet/root"

// setupCollNet attaches every rank to the aggregation tree when
// GOCCL_COLLNET_ENABLE=1: rank 0 publishes the root's address
// (GOCCL_COLLNET_AGGD) in the store, every rank reads it there and
// attaches (the root places it), then the ranks agree with an AllReduce
// of a flag over the links. If any rank could not attach, all detach and
// warn: their AllReduces run on the links (NCCL's fallback when CollNet
// setup fails).
func (c *Comm) setupCollNet(ctx context.Context) error {
	on, err := config.CollNetEnable.Bool()
	if err != nil || !on || c.group == nil {
		return err
	}
	if c.rank == 0 {
		if err := c.rdv.Set(ctx, collNetKey, []byte(config.CollNetAggd.Get())); err != nil {
			return c.errorf(opBarrier, 0, "publishing %s: %w", config.CollNetAggd.Name, err)
		}
	}
	root, err := c.rdv.Get(ctx, collNetKey)
	if err != nil {
		return c.errorf(opBarrier, 0, "reading the aggregation tree's root from the store: %w", err)
	}
	// On several hosts with several ranks each, the chain: the ranks of
	// each local index form a job of their own, one rank per host (the
	// host's rank of that local index carries its share of the host's
	// reduction), so each host's link carries its buffer once each way.
	job, rank, size := c.jobID, c.rank, c.size
	h := c.group.Hierarchy()
	chain := h.Hierarchical()
	if chain {
		job = fmt.Sprintf("%s/local-%d", c.jobID, h.LocalOf[c.rank])
		rank, size = h.HostOf[c.rank], h.Hosts
	}
	var cl *collnet.Client
	var why error
	if len(root) == 0 {
		why = fmt.Errorf("%s=1 but %s is unset on rank 0", config.CollNetEnable.Name, config.CollNetAggd.Name)
	} else {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		sum := sha256.Sum256([]byte(job))
		var dom *roce.Domain // RoCE links: the aggregation tree's RDMA path
		if one, ok := bootstrap.Cap[*bootstrap.OneSided](c.caps); ok {
			dom = one.Domain
		}
		cl, why = collnet.Attach(actx, string(root), collnet.JobID(sum[:16]), rank, size, dom)
		cancel()
	}
	ok := []int32{1}
	if why != nil {
		ok[0] = 0
	}
	if err := AllReduce(ctx, c, ok, ok, 1, Min); err != nil {
		if cl != nil {
			cl.Close()
		}
		return err
	}
	if ok[0] == 0 {
		if cl != nil {
			cl.Close()
		}
		if why == nil {
			why = errors.New("another rank could not attach")
		}
		c.log.Warnf(subInit, "CollNet off, AllReduce runs on the links: %v", why)
		return nil
	}
	c.collnet = cl
	c.group.SetAggregator(collNetAgg{c})
	c.setFacts(func(f *algo.Facts) { f.CollNet = true })
	via := "TCP"
	if cl.RoCE() {
		via = "RoCE"
	}
	c.log.Infof(subInit, "CollNet: rank %d attached to aggregation node %s (root %s) via %s", c.rank, cl.Node(), root, via)
	if chain {
		c.log.Infof(subInit, "CollNet chain: %d hosts x %d ranks; this rank carries local share %d of host %d through the tree",
			h.Hosts, h.PerHost, h.LocalOf[c.rank], h.HostOf[c.rank])
	}
	return nil
}

// collNetAgg is the aggregation tree as the collnet schedule uses it
// (algo.Aggregator): failures of the tree are AllReduce errors that wrap
// ErrCollNet.
type collNetAgg struct{ c *Comm }

func (x collNetAgg) AllReduce(ctx context.Context, op *algo.Op, send, recv []byte) error {
	c, h := x.c, &op.Header
	rop := reduce.Op(h.RedOp)
	if rop == reduce.Avg {
		rop = reduce.Sum // finish divides
	}
	err := c.collnet.AllReduce(ctx, h.Seq, send, recv, h.DType, uint8(rop), op.ElemSize)
	if errors.Is(err, collnet.ErrAggregation) {
		return c.errorf(opAllReduce, h.Seq, "%w", err)
	}
	return err
}
