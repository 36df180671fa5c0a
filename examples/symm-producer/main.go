// Command symm-producer moves blocks from a producer (rank 0) to a consumer
// (rank 1) through a symmetric-memory window (goccl.Window): the producer
// puts each block into the consumer's window and signals it; the consumer
// waits for the signal, checks the block and signals back. No receive is
// posted and the consumer's CPU copies nothing: the bytes are in its
// window when the signal is.
//
//	go run ./cmd/goccl run -np 2 ./examples/symm-producer
//	GOCCL_NET=roce GOCCL_SHM_DISABLE=1 go run ./cmd/goccl run -np 2 ./examples/symm-producer
//
// The first runs over shared memory (the ranks map each other's windows),
// the second over soft RoCE queue pairs (RDMA WRITE for the block, an
// aligned 8-byte RDMA WRITE for the signal). Per block size rank 0 prints:
//
//   - put+signal latency, p50 and p99 in µs: half the round trip of a
//     block put with its signal, answered by the consumer's signal (the
//     convention of ib_write_lat and osu_latency);
//   - the same ping-pong with two-sided Send/Recv of the block (answered
//     by an 8-byte Send), beside it;
//   - streaming bandwidth in GB/s (1e9 bytes/s): -stream blocks put into a
//     ring of -slots slots in the consumer's window, the consumer returning
//     credits by signal, against Send/Recv of the same blocks;
//   - wrong: blocks the consumer found with a wrong sequence number in
//     their first, middle or last 8 bytes (0 expected).
//
// Ranks beyond 1 only join the window (a collective) and wait.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/examples/internal/exmain"
)

type config struct {
	sizes  []int
	iters  int // ping-pong iterations per size
	stream int // blocks streamed per size
	slots  int // slots of the consumer's ring
}

func main() {
	exmain.Main("symm-producer", func(ctx context.Context, args []string, stdout io.Writer) (int, error) {
		cfg, err := parseFlags(args)
		if err != nil {
			return -1, err
		}
		return exmain.WithComm(ctx, stdout, func(c *goccl.Comm, out io.Writer) error {
			path, rows, err := measure(ctx, c, cfg)
			if err == nil {
				printRows(out, c, path, rows)
			}
			return err
		})
	})
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("symm-producer", flag.ContinueOnError)
	sizes := fs.String("sizes", "8,4K,64K,1M", "block sizes in bytes (K, M suffixes), at least 8 each")
	cfg := config{}
	fs.IntVar(&cfg.iters, "n", 2000, "ping-pong iterations per size")
	fs.IntVar(&cfg.stream, "stream", 2000, "blocks streamed per size")
	fs.IntVar(&cfg.slots, "slots", 8, "slots of the consumer's ring")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	for _, s := range strings.Split(*sizes, ",") {
		n, err := parseSize(s)
		if err != nil || n < 8 {
			return cfg, fmt.Errorf("-sizes: %q is not a size of at least 8 bytes", s)
		}
		cfg.sizes = append(cfg.sizes, n)
	}
	if cfg.iters < 1 || cfg.stream < 1 || cfg.slots < 1 {
		return cfg, fmt.Errorf("-n %d, -stream %d, -slots %d: each must be at least 1", cfg.iters, cfg.stream, cfg.slots)
	}
	return cfg, nil
}

func parseSize(s string) (int, error) {
	mult := 1
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	}
	n, err := strconv.Atoi(s)
	return n * mult, err
}

// row is one block size's figures (rank 0's).
type row struct {
	bytes              int
	putP50, putP99     time.Duration
	sendP50, sendP99   time.Duration
	putGBps, sendGBps  float64
	wrong              int // blocks the consumer found wrong
	pingIters, streamN int
}

// Signal words: the consumer's "block arrived" (sequence number), the
// producer's "block consumed" (sequence number, also the credits).
const (
	sigArrived  = 0
	sigConsumed = 1
)

const producer, consumer = 0, 1

// measure runs every size and returns the path from the producer to the
// consumer ("shm" or "roce") and the rows (the producer's timings; the
// consumer's count of wrong blocks).
func measure(ctx context.Context, c *goccl.Comm, cfg config) (string, []row, error) {
	if c.Size() < 2 {
		return "", nil, fmt.Errorf("needs at least 2 ranks, have %d", c.Size())
	}
	maxB := slices.Max(cfg.sizes)
	w, err := goccl.NewWindow(ctx, c, cfg.slots*maxB, goccl.WindowSignals(2))
	if err != nil {
		return "", nil, err
	}
	path := w.Path(consumer)
	p := &pair{c: c, w: w, block: make([]byte, maxB), ack: make([]byte, 8)}
	var rows []row
	for _, b := range cfg.sizes {
		r := row{bytes: b, pingIters: cfg.iters, streamN: cfg.stream}
		var err error
		if c.Rank() <= consumer {
			err = p.sizeRuns(ctx, &r, cfg)
		}
		if err == nil {
			err = c.Barrier(ctx)
		}
		if err != nil {
			w.Free(ctx)
			return "", nil, fmt.Errorf("%d-byte blocks: %w", b, err)
		}
		rows = append(rows, r)
	}
	// The consumer's count of wrong blocks goes to rank 0 for the table.
	wrong := make([]int64, len(rows))
	for i, r := range rows {
		wrong[i] = int64(r.wrong)
	}
	if c.Rank() == consumer {
		err = goccl.Send(ctx, c, wrong, len(wrong), producer)
	} else if c.Rank() == producer {
		err = goccl.Recv(ctx, c, wrong, len(wrong), consumer)
	}
	for i := range rows {
		rows[i].wrong = int(wrong[i])
	}
	if ferr := w.Free(ctx); err == nil {
		err = ferr
	}
	return path, rows, err
}

// pair is the producer's or the consumer's state.
type pair struct {
	c     *goccl.Comm
	w     *goccl.Window
	seq   uint64 // blocks moved so far through the window (all sizes)
	block []byte
	ack   []byte
}

func (p *pair) sizeRuns(ctx context.Context, r *row, cfg config) error {
	lat, err := p.pingPong(ctx, r, cfg.iters)
	if err != nil {
		return err
	}
	r.putP50, r.putP99 = pct(lat, 50), pct(lat, 99)
	if lat, err = p.sendRecvPingPong(ctx, r.bytes, cfg.iters); err != nil {
		return err
	}
	r.sendP50, r.sendP99 = pct(lat, 50), pct(lat, 99)
	d, err := p.streamWindow(ctx, r, cfg.stream, cfg.slots)
	if err != nil {
		return err
	}
	r.putGBps = float64(r.bytes) * float64(cfg.stream) / d.Seconds() / 1e9
	if d, err = p.streamSendRecv(ctx, r.bytes, cfg.stream); err != nil {
		return err
	}
	r.sendGBps = float64(r.bytes) * float64(cfg.stream) / d.Seconds() / 1e9
	return nil
}

// stamp writes seq into the block's first, middle and last 8 bytes.
func stamp(b []byte, seq uint64) {
	for _, off := range marks(len(b)) {
		binary.LittleEndian.PutUint64(b[off:], seq)
	}
}

// stamped reports whether b carries seq where stamp writes it.
func stamped(b []byte, seq uint64) bool {
	for _, off := range marks(len(b)) {
		if binary.LittleEndian.Uint64(b[off:]) != seq {
			return false
		}
	}
	return true
}

func marks(n int) [3]int { return [3]int{0, (n / 2) &^ 7, n - 8} }

// pingPong: the producer puts a block and signals; the consumer checks it
// and signals back. Returns the producer's half round trips.
func (p *pair) pingPong(ctx context.Context, r *row, iters int) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, iters)
	blk := p.block[:r.bytes]
	for i := 0; i < iters; i++ {
		p.seq++
		if p.c.Rank() == producer {
			stamp(blk, p.seq)
			t0 := time.Now()
			if err := p.w.PutSignal(ctx, consumer, 0, blk, sigArrived, goccl.SignalSet, p.seq); err != nil {
				return nil, err
			}
			if _, err := p.w.WaitSignal(ctx, sigConsumed, goccl.CmpGE, p.seq); err != nil {
				return nil, err
			}
			lat = append(lat, time.Since(t0)/2)
			continue
		}
		if _, err := p.w.WaitSignal(ctx, sigArrived, goccl.CmpGE, p.seq); err != nil {
			return nil, err
		}
		if !stamped(p.w.Local()[:r.bytes], p.seq) {
			r.wrong++
		}
		if err := p.w.Signal(ctx, producer, sigConsumed, goccl.SignalSet, p.seq); err != nil {
			return nil, err
		}
	}
	return lat, nil
}

// sendRecvPingPong is the two-sided baseline: the block by Send/Recv,
// answered by an 8-byte Send.
func (p *pair) sendRecvPingPong(ctx context.Context, n, iters int) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, iters)
	blk := p.block[:n]
	for i := 0; i < iters; i++ {
		if p.c.Rank() == producer {
			t0 := time.Now()
			if err := goccl.Send(ctx, p.c, blk, n, consumer); err != nil {
				return nil, err
			}
			if err := goccl.Recv(ctx, p.c, p.ack, 8, consumer); err != nil {
				return nil, err
			}
			lat = append(lat, time.Since(t0)/2)
			continue
		}
		if err := goccl.Recv(ctx, p.c, blk, n, producer); err != nil {
			return nil, err
		}
		if err := goccl.Send(ctx, p.c, p.ack, 8, producer); err != nil {
			return nil, err
		}
	}
	return lat, nil
}

// streamWindow: the producer fills a ring of slots in the consumer's
// window, waiting for credits (the consumer's "consumed" signal) when it
// is slots ahead; the consumer checks each block and returns the slots
// half a ring at a time.
func (p *pair) streamWindow(ctx context.Context, r *row, blocks, slots int) (time.Duration, error) {
	if err := p.sync(ctx); err != nil {
		return 0, err
	}
	base := p.seq
	n := r.bytes
	t0 := time.Now()
	for i := 0; i < blocks; i++ {
		seq := base + uint64(i) + 1
		off := (i % slots) * n
		if p.c.Rank() == producer {
			if i >= slots {
				if _, err := p.w.WaitSignal(ctx, sigConsumed, goccl.CmpGE, seq-uint64(slots)); err != nil {
					return 0, err
				}
			}
			blk := p.block[:n]
			stamp(blk, seq)
			if err := p.w.PutSignal(ctx, consumer, off, blk, sigArrived, goccl.SignalSet, seq); err != nil {
				return 0, err
			}
			continue
		}
		if _, err := p.w.WaitSignal(ctx, sigArrived, goccl.CmpGE, seq); err != nil {
			return 0, err
		}
		if !stamped(p.w.Local()[off:off+n], seq) {
			r.wrong++
		}
		// Credits go back in batches of half the ring, and after the last
		// block.
		if (i+1)%max(1, slots/2) == 0 || i == blocks-1 {
			if err := p.w.Signal(ctx, producer, sigConsumed, goccl.SignalSet, seq); err != nil {
				return 0, err
			}
		}
	}
	if p.c.Rank() == producer {
		// Done when the consumer has taken the last block.
		if _, err := p.w.WaitSignal(ctx, sigConsumed, goccl.CmpGE, base+uint64(blocks)); err != nil {
			return 0, err
		}
	}
	p.seq = base + uint64(blocks)
	return time.Since(t0), nil
}

// streamSendRecv is the two-sided baseline: the same blocks by Send/Recv.
func (p *pair) streamSendRecv(ctx context.Context, n, blocks int) (time.Duration, error) {
	if err := p.sync(ctx); err != nil {
		return 0, err
	}
	blk := p.block[:n]
	t0 := time.Now()
	for i := 0; i < blocks; i++ {
		var err error
		if p.c.Rank() == producer {
			err = goccl.Send(ctx, p.c, blk, n, consumer)
		} else {
			err = goccl.Recv(ctx, p.c, blk, n, producer)
		}
		if err != nil {
			return 0, err
		}
	}
	if err := p.sync(ctx); err != nil { // the last block has arrived
		return 0, err
	}
	return time.Since(t0), nil
}

// sync returns on the producer once the consumer has called it (an
// 8-byte message), and on the consumer at once.
func (p *pair) sync(ctx context.Context) error {
	if p.c.Rank() == producer {
		return goccl.Recv(ctx, p.c, p.ack, 8, consumer)
	}
	return goccl.Send(ctx, p.c, p.ack, 8, producer)
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func us(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d.Nanoseconds())/1e3) }

func printRows(out io.Writer, c *goccl.Comm, path string, rows []row) {
	fmt.Fprintf(out, "# symm-producer: rank %d puts blocks into rank %d's window via %s; %d ranks\n",
		producer, consumer, path, c.Size())
	fmt.Fprintf(out, "# latency: half round trip in µs; stream: GB/s (1e9 B/s)\n")
	fmt.Fprintf(out, "%10s %6s %10s %10s %10s %10s %8s %10s %10s %6s\n",
		"bytes", "iters", "put p50", "put p99", "send p50", "send p99", "blocks", "put GB/s", "send GB/s", "wrong")
	for _, r := range rows {
		fmt.Fprintf(out, "%10d %6d %10s %10s %10s %10s %8d %10.4g %10.4g %6d\n", r.bytes, r.pingIters,
			us(r.putP50), us(r.putP99), us(r.sendP50), us(r.sendP99), r.streamN, r.putGBps, r.sendGBps, r.wrong)
	}
}
