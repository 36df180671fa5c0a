package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"syscall"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/rendezvous"
	"github.com/goccl/goccl/transport/shm"
)

// shmNet links ranks on one host over shared-memory rings (transport/shm):
// the table's first row.
type shmNet struct {
	dir     string // GOCCL_SHM_DIR: the rings' directory
	disable bool   // GOCCL_SHM_DISABLE: no shared memory
}

func shmFromEnv() (provider, error) {
	off, err := config.ShmDisable.Bool()
	return shmNet{dir: config.ShmDir.Get(), disable: off}, err
}

// usable: the peer's card names this rank's host.
func (s shmNet) usable(me, peer card) bool { return !s.disable && peer.Host == me.Host }

func (s shmNet) connect(ctx context.Context, b *boot, peers []bool) error {
	return b.connectShm(ctx, s.dir, peers)
}

// connectShm creates this rank's inbound rings from every same-host peer,
// opens the peers' rings for its outbound traffic, links each such pair
// (b.links), and unlinks the files once every rank has mapped them (so
// nothing is left in /dev/shm after a crash). The ring that carries rank
// src's messages to rank dst is the file goccl-<job id>-<src>-<dst> of the
// shared-memory directory; dst creates it, src opens it.
//
// With a link to reuse (Params.Reuse) the pair keeps its two rings instead:
// each side takes them back from the old link (shm.Reclaim, which waits for
// the old link's calls to end) and publishes 'R' for the peer; once it reads
// the peer's 'R' it resets its inbound ring (shm.ResetInbound), and both
// make the new link after the barrier, when both resets are done. A pair
// whose sides disagree (one reclaimed, the other made a new ring) uses the
// table's next transport, as below.
//
// A ring that cannot be created (typically /dev/shm too small: Docker gives
// containers 64 MiB) is not fatal: the rank logs what is missing and how to
// fix it, and publishes which inbound rings it has; a pair of ranks uses
// shared memory only if both rings between them exist, and the table's next
// usable transport otherwise (useShm is cleared for it), so both sides
// always agree.
func (b *boot) connectShm(ctx context.Context, dir string, useShm []bool) error {
	rank, size, links, store, jobID, cards := b.p.Rank, b.p.Size, b.links, b.store, b.jobID, b.cards
	if dir == "" {
		dir = "/dev/shm"
	}
	cfg := shm.Config{Dir: dir}
	path := func(src, dst int) string {
		return filepath.Join(dir, fmt.Sprintf("goccl-%s-%d-%d", jobID, src, dst))
	}
	// Waits yield the processor only when this host has more ranks than
	// this process has CPUs (shm.WithYield).
	local := 0
	for _, c := range cards {
		if c.Host == cards[rank].Host {
			local++
		}
	}
	yield := local > runtime.NumCPU()
	if local > 1 {
		how := "poll, then sleep"
		if yield {
			how = "poll, yield the processor, then sleep"
		}
		b.p.Log(slog.LevelInfo, "SHM", []slog.Attr{slog.Int("local_ranks", local), slog.Int("cpus", runtime.NumCPU()), slog.Bool("yield", yield)},
			"%d ranks on this host, %d CPUs: shared-memory waits %s", local, runtime.NumCPU(), how)
	}
	opts := func(p int) []shm.LinkOption {
		return []shm.LinkOption{shm.WithPeerPID(cards[p].Pid), shm.WithYield(yield)}
	}
	in := make([]*shm.Ring, size)
	kept := make([]*shm.Ring, size) // kept[p]: the reclaimed ring from this rank to p
	// have[p] == '1': the ring from p to this rank exists; 'R': this rank
	// reclaimed both rings it had with p.
	have := make([]byte, size)
	var failed []int
	var firstFail error
	for p, ok := range useShm {
		have[p] = '0'
		if !ok {
			continue
		}
		if p < len(b.p.Reuse) && b.p.Reuse[p] != nil {
			if out, rin, err := shm.Reclaim(ctx, b.p.Reuse[p]); err == nil {
				in[p], kept[p], have[p] = rin, out, 'R'
				continue
			}
		}
		r, err := shm.CreateRing(path(p, rank), cfg)
		if err != nil {
			failed = append(failed, p)
			if firstFail == nil {
				firstFail = err
			}
			continue
		}
		in[p], have[p] = r, '1'
	}
	if len(failed) > 0 {
		b.p.Log(slog.LevelWarn, "SHM", []slog.Attr{slog.Any("peers", failed)}, "%v; using TCP instead of shared memory with rank(s) %v", shmAdvice(dir, cfg, useShm, firstFail), failed)
	}
	// On failure: remove this rank's rings (the files and the mappings not
	// yet owned by a link; Connect's failure path closes the links).
	abort := func(err error) error {
		for p, r := range in {
			if r != nil {
				r.Unlink()
				if links[p] == nil {
					r.Close()
				}
			}
			if kept[p] != nil && links[p] == nil {
				kept[p].Close()
			}
		}
		return err
	}
	if err := store.Set(ctx, fmt.Sprintf("goccl/shm/%d", rank), have); err != nil {
		return abort(err)
	}
	var peerFailed []int
	for p, ok := range useShm {
		if !ok {
			continue
		}
		// Any failure ends the exchange here, before the barrier below: a
		// store call that failed may have been the last one this client
		// made on its server (see rendezvous.ErrReplaced), and a rank that
		// cannot finish must not make the others wait for it there.
		v, err := store.Get(ctx, fmt.Sprintf("goccl/shm/%d", p))
		switch {
		case err != nil:
			return abort(fmt.Errorf("waiting for rank %d's shared memory: %w", p, err))
		case len(v) != size:
			return abort(fmt.Errorf("rank %d published a bad shared-memory record %q", p, v))
		}
		if in[p] == nil || v[rank] != have[p] {
			// One of the two rings is missing, or one side reclaimed them
			// and the other did not: TCP for this pair.
			useShm[p] = false
			if in[p] != nil {
				in[p].Unlink()
				in[p].Close()
				in[p] = nil
				peerFailed = append(peerFailed, p)
			}
			if kept[p] != nil {
				kept[p].Close()
				kept[p] = nil
			}
			continue
		}
		if have[p] == 'R' {
			// The peer has reclaimed its side: no call touches the rings.
			if err := in[p].ResetInbound(); err != nil {
				return abort(fmt.Errorf("shared memory with rank %d: %w", p, err))
			}
			continue // linked after the barrier, when the peer's reset is done
		}
		out, err := shm.OpenRing(path(rank, p))
		if err != nil {
			return abort(fmt.Errorf("shared memory with rank %d: %w", p, err))
		}
		// Watching the peer's pid turns its death into an error naming it
		// within one futex timeout (10 ms).
		links[p] = shm.NewLink(rank, p, out, in[p], opts(p)...)
	}
	if len(peerFailed) > 0 {
		b.p.Log(slog.LevelWarn, "SHM", []slog.Attr{slog.Any("peers", peerFailed)}, "rank(s) %v could not create their shared memory for this rank (see their warnings); using TCP with them", peerFailed)
	}
	// Every rank reaches this barrier, with or without shared-memory peers.
	if err := rendezvous.Barrier(ctx, store, "goccl/shm-mapped", size); err != nil {
		return abort(err)
	}
	for p, r := range in {
		if kept[p] != nil {
			links[p] = shm.NewLink(rank, p, kept[p], r, opts(p)...)
		}
		if r != nil {
			r.Unlink()
		}
	}
	return nil
}

// shmAdvice explains a failed ring creation: for a full file system, how
// much shared memory the job needs on this host and how to get it.
func shmAdvice(dir string, cfg shm.Config, useShm []bool, err error) error {
	if !errors.Is(err, syscall.ENOSPC) {
		return err
	}
	ring, rerr := cfg.RingBytes()
	if rerr != nil {
		return err
	}
	local := 1
	for _, ok := range useShm {
		if ok {
			local++
		}
	}
	need := int64(local*(local-1)) * ring
	var st syscall.Statfs_t
	size, free := "unknown", "unknown"
	if syscall.Statfs(dir, &st) == nil {
		size = mib(int64(st.Blocks) * st.Bsize)
		free = mib(int64(st.Bavail) * st.Bsize)
	}
	// Room for the rings plus a quarter for whatever else lives there.
	suggest := (need + need/4 + (1<<20 - 1)) >> 20
	return fmt.Errorf("%s is too small: %s, %s free; %d ranks on this host need %s of shared memory (%d rings of %s): "+
		"give the container more (docker run --shm-size=%dm, or a Kubernetes emptyDir with medium: Memory mounted at /dev/shm), "+
		"or set %s=1 to use TCP (%w)",
		dir, size, free, local, mib(need), local*(local-1), mib(ring), suggest, config.ShmDisable.Name, err)
}

// mib formats a byte count in MiB.
func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
