package goccl

import (
	"context"
	"time"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/rendezvous"
	"github.com/goccl/goccl/topo"
)

// The job's topology at Init (GOCCL_TOPO_DUMP_FILE), NCCL_TOPO_DUMP_FILE's
// counterpart. Each rank detects its host (topo.Detect: sysfs, procfs,
// nvidia-smi) and publishes it in the rendezvous store before the Init
// barrier; after the barrier every rank that publishes has published, so
// rank 0 reads them without waiting (topo.Collect: a rank whose
// environment lacks the variable is listed as missing instead of stalling
// Init) and writes the file. Nothing of this runs without the variable: a
// detection costs milliseconds, and nvidia-smi, where installed, far more.
// A failure is a warning, never an Init failure. Split's communicators
// write nothing: their ranks are the parent's, whose Init wrote the job, and
// a subset would overwrite it.

// detectTopology describes this rank's host when GOCCL_TOPO_DUMP_FILE is
// set; nil otherwise, or when detection fails (a warning).
func (c *Comm) detectTopology() *topo.Host {
	if c.topoDump == "" {
		return nil
	}
	h, err := topo.Detect(topo.Options{})
	if err != nil {
		c.log.Warnf(subInit, "%s: detecting this host's topology: %v", config.TopoDumpFile.Name, err)
		return nil
	}
	if id := config.HostID.Get(); id != "" {
		h.ID = "id:" + id // group ranks as the links do (internal/bootstrap)
	}
	return h
}

// publishTopology puts this rank's host in the store (before the Init
// barrier).
func (c *Comm) publishTopology(ctx context.Context, store rendezvous.Store) {
	h := c.detectTopology()
	if h == nil {
		return
	}
	if err := topo.Publish(ctx, store, c.rank, h); err != nil {
		c.log.Warnf(subInit, "%s: %v", config.TopoDumpFile.Name, err)
	}
}

// writeTopology is rank 0's part: the job's topology, read from the store
// (after the Init barrier) or, for a communicator of one rank (store nil),
// made of own, written to GOCCL_TOPO_DUMP_FILE.
func (c *Comm) writeTopology(ctx context.Context, store rendezvous.Store, own *topo.Host) {
	if c.topoDump == "" || c.rank != 0 {
		return
	}
	start := time.Now()
	var job *topo.Job
	if store == nil {
		if own == nil {
			return
		}
		job = topo.NewJob([]*topo.Host{own})
	} else {
		var err error
		if job, err = topo.Collect(ctx, store, c.size); err != nil {
			c.log.Warnf(subInit, "%s: %v", config.TopoDumpFile.Name, err)
			return
		}
	}
	path := expandDebugFile(c.topoDump)
	if err := job.WriteFile(path); err != nil {
		c.log.Warnf(subInit, "%s: %v", config.TopoDumpFile.Name, err)
		return
	}
	if m := job.Missing(); len(m) > 0 {
		c.log.Warnf(subInit, "%s: rank(s) %s published no topology (is it set on every rank?); %s lists them as missing",
			config.TopoDumpFile.Name, topo.FormatCPUList(m), path)
	}
	c.log.Infof(subInit, "topology of %d ranks on %d host(s) written to %s in %v", c.size, len(job.Hosts), path,
		time.Since(start).Round(time.Microsecond))
}
