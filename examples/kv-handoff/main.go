// Command kv-handoff moves the KV cache of inference requests from a
// prefill process to a decode process with the xfer agent, the way vLLM's
// NixlConnector does for disaggregated serving: the decode worker pulls
// the blocks of each request with one READ once prefill says they are
// ready, and the READ's notification tells prefill it may free them.
//
//	go run ./examples/kv-handoff                 # same host: shared memory
//	go run ./examples/kv-handoff -net tcp        # over TCP
//	go run ./examples/kv-handoff -net roce       # RDMA READ between soft RoCE devices
//
// The cache is paged as vLLM's: per layer, blocks of -block-tokens tokens,
// each block holding K and V for every KV head (bf16): with the defaults
// (a 7-8 B model: 32 layers, 8 KV heads, head dim 128, 16-token blocks) a
// block is 64 KiB per layer and a token costs 128 KiB across the layers.
// Prefill and decode have pools of their own; a request's blocks sit at
// different, scattered block ids on each side.
//
// Three ways to hand a request over are measured on the same stream of
// requests (prompt lengths log-uniform in [-min-tokens, -max-tokens],
// then -reps-4096 requests of exactly 4096 tokens):
//
//   - direct: one READ whose descriptor list names every (layer, block)
//     pair, prefill's blocks into decode's, no copy by either CPU
//     (packed direct transfer of the block list);
//   - staging: prefill packs the blocks into a contiguous buffer, decode
//     READs that one descriptor into its own buffer and unpacks it into its
//     blocks (CPU staging, what a connector without descriptor lists does;
//     the copies use the same REP MOVSB copy as xfer's);
//   - file: prefill offloads the blocks to its FILE tier (a WRITE to its
//     own file) and decode READs them from there (cold blocks brought back).
//
// Latency is from decode hearing "ready" to the blocks being in its pool
// (including making the request; for staging also prefill's packing and
// decode's unpacking); throughput is bytes over the sum of latencies.
// Decode checks a signature in every 512 bytes of every block it got
// (wrong: blocks with any mismatch, 0 expected).
//
// With GOCCL_TRACE_FILE set (%p: the process id), decode writes each
// request's serving spans to that trace: "request" (decode asks prefill
// for it) holding "prefill" (up to prefill's "ready"), "kv transfer" (the
// READ, and for staging the unpacking; its path arg is the mode) and
// "decode" (the pass that reads every KV byte once, as a first decode
// step's attention does: here the signature check), each with the
// request's number as seq. `goccl doctor trace` gives the time to first
// token and the KV transfer's share of it per mode.
package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	gocclconfig "github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/memcpy"
	"github.com/goccl/goccl/internal/trace"
	"github.com/goccl/goccl/rdma"
	"github.com/goccl/goccl/xfer"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

type config struct {
	layers, heads, dim, blockTokens int
	requests, minTok, maxTok, reps  int
	net, role, dir                  string
	verbose                         bool
	modes                           []string
	seed                            uint64
}

func parse(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("kv-handoff", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.layers, "layers", 32, "transformer layers")
	fs.IntVar(&c.heads, "kv-heads", 8, "KV heads")
	fs.IntVar(&c.dim, "head-dim", 128, "head dimension")
	fs.IntVar(&c.blockTokens, "block-tokens", 16, "tokens per KV block")
	fs.IntVar(&c.requests, "requests", 24, "requests of random prompt length per mode")
	fs.IntVar(&c.minTok, "min-tokens", 512, "shortest prompt")
	fs.IntVar(&c.maxTok, "max-tokens", 8192, "longest prompt")
	fs.IntVar(&c.reps, "reps-4096", 5, "requests of exactly 4096 tokens per mode (0: none)")
	fs.StringVar(&c.net, "net", "shm", "shm (prefill's cache mapped by decode; same host), tcp or roce (soft RoCE devices on 127.0.0.1)")
	modes := fs.String("modes", "direct,staging,file", "hand-over modes to measure")
	fs.StringVar(&c.dir, "dir", "", "directory of prefill's FILE tier (default: a temporary one)")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the prompt lengths")
	fs.BoolVar(&c.verbose, "v", false, "print every request's figures to standard error")
	fs.StringVar(&c.role, "role", "decode", "decode (starts prefill as a child) or prefill (internal)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.modes = strings.Split(*modes, ",")
	for _, m := range c.modes {
		if m != "direct" && m != "staging" && m != "file" {
			return c, fmt.Errorf("-modes: %q (want direct, staging, file)", m)
		}
	}
	switch {
	case c.layers < 1 || c.heads < 1 || c.dim < 1 || c.blockTokens < 1:
		return c, errors.New("-layers, -kv-heads, -head-dim and -block-tokens must be positive")
	case c.minTok < 1 || c.maxTok < c.minTok:
		return c, fmt.Errorf("-min-tokens %d, -max-tokens %d: want 1 <= min <= max", c.minTok, c.maxTok)
	case c.net != "shm" && c.net != "tcp" && c.net != "roce":
		return c, fmt.Errorf("-net %q: want shm, tcp or roce", c.net)
	case c.blockBytes()%512 != 0:
		return c, fmt.Errorf("a block of %d bytes: want a multiple of 512", c.blockBytes())
	}
	return c, nil
}

// blockBytes is one block of one layer: K and V of blockTokens tokens, bf16.
func (c config) blockBytes() int { return c.blockTokens * 2 * c.heads * c.dim * 2 }

// pool is the blocks per layer each side holds: the longest request's.
func (c config) pool() int {
	return (max(c.maxTok, 4096*min(c.reps, 1)) + c.blockTokens - 1) / c.blockTokens
}

func (c config) cacheBytes() int { return c.layers * c.pool() * c.blockBytes() }

// off is the offset of (layer, block) in a cache.
func (c config) off(layer, block int) uint64 {
	return uint64((layer*c.pool() + block) * c.blockBytes())
}

// blocks picks n scattered block ids of a pool (a permutation's prefix).
func (c config) blocks(n int, seed uint64) []int {
	p := rand.New(rand.NewPCG(seed, 99)).Perm(c.pool())
	return p[:n]
}

// sign writes the signature of (req, layer, j) in every 512 bytes of b.
func sign(b []byte, req, layer, j int) {
	v := uint64(req)<<40 | uint64(layer)<<24 | uint64(j)
	for o := 0; o < len(b); o += 512 {
		binary.LittleEndian.PutUint64(b[o:], v^uint64(o))
	}
}

func signed(b []byte, req, layer, j int) bool {
	v := uint64(req)<<40 | uint64(layer)<<24 | uint64(j)
	for o := 0; o < len(b); o += 512 {
		if binary.LittleEndian.Uint64(b[o:]) != v^uint64(o) {
			return false
		}
	}
	return true
}

func run(args []string, stdout, stderr io.Writer) int {
	c, err := parse(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "kv-handoff:", err)
		}
		return 2
	}
	if c.role == "prefill" {
		err = prefill(c, os.Stdin, stdout)
	} else {
		err = decode(c, args, stdout, stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kv-handoff (%s): %v\n", c.role, err)
		return 1
	}
	return 0
}

// side is one process's agent and memory.
type side struct {
	rec     *trace.Recorder // the serving spans (GOCCL_TRACE_FILE); nil: none
	a       *xfer.Agent
	dev     *rdma.Device // -net roce
	cache   []byte
	cacheD  xfer.Desc
	staging []byte
	stageD  xfer.Desc
}

func newSide(c config, name string) (*side, error) {
	o := xfer.Options{Listen: "127.0.0.1:0", NoSHM: c.net != "shm", ChunkBytes: 1 << 20}
	if c.net == "roce" {
		d, err := rdma.Open("127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		o.RDMA = d
	}
	a, err := xfer.NewAgent(name, o)
	if err != nil {
		return nil, err
	}
	s := &side{a: a, dev: o.RDMA}
	if s.cache, s.cacheD, err = a.Alloc(c.cacheBytes()); err == nil {
		s.staging, s.stageD, err = a.Alloc(c.cacheBytes())
	}
	if err != nil {
		a.Close()
		return nil, err
	}
	return s, nil
}

func (s *side) close() {
	s.a.Close()
	if s.dev != nil {
		s.dev.Close()
	}
}

// prefill serves requests: "req ID TOKENS MODE" → computes (signs) the
// blocks, prepares them for MODE and answers "ready ID NANOS BLOCKS".
func prefill(c config, in io.Reader, out io.Writer) error {
	s, err := newSide(c, "prefill")
	if err != nil {
		return err
	}
	defer s.close()
	dir := c.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "kv-handoff-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	f, err := xfer.OpenFile(filepath.Join(dir, "kv-tier.dat"), int64(c.cacheBytes()), false)
	if err != nil {
		return err
	}
	defer f.Close()
	fileD, err := s.a.RegisterFile(f, 0, int64(c.cacheBytes()))
	if err != nil {
		return err
	}
	fmt.Fprintln(out, base64.StdEncoding.EncodeToString(s.a.LocalMetadata()))
	line, err := bufio.NewReader(in).ReadString('\n')
	blob, derr := base64.StdEncoding.DecodeString(strings.TrimSpace(line))
	if err != nil || derr != nil {
		return fmt.Errorf("no metadata from decode (%v %v)", err, derr)
	}
	if _, err := s.a.LoadRemoteMetadata(blob); err != nil {
		return err
	}
	ctx := context.Background()
	bb := c.blockBytes()
	for {
		msg, err := s.a.NextNotif(ctx, "decode")
		if err != nil {
			return err
		}
		f := strings.Fields(string(msg))
		if len(f) == 1 && f[0] == "quit" {
			return nil
		}
		if len(f) != 4 || f[0] != "req" {
			continue // "done ID": the READ's notification
		}
		id, _ := strconv.Atoi(f[1])
		tokens, _ := strconv.Atoi(f[2])
		nblk := (tokens + c.blockTokens - 1) / c.blockTokens
		blocks := c.blocks(nblk, uint64(id))
		for l := range c.layers {
			for j, b := range blocks {
				sign(s.cache[c.off(l, b):c.off(l, b)+uint64(bb)], id, l, j)
			}
		}
		t0 := time.Now()
		switch f[3] {
		case "staging": // pack layer-major, block order
			for l := range c.layers {
				for j, b := range blocks {
					memcpy.Copy(s.staging[(l*nblk+j)*bb:], s.cache[c.off(l, b):c.off(l, b)+uint64(bb)])
				}
			}
		case "file": // offload the blocks to the FILE tier
			var mem, fd []xfer.Desc
			for l := range c.layers {
				for _, b := range blocks {
					mem = append(mem, s.cacheD.Sub(c.off(l, b), uint64(bb)))
					fd = append(fd, fileD.Sub(c.off(l, b), uint64(bb)))
				}
			}
			r, err := s.a.CreateXferReq(ctx, xfer.WRITE, xfer.DRAM, mem, "", xfer.FILE, fd, nil)
			if err == nil {
				_, err = s.a.PostXferReq(r)
			}
			if err == nil {
				err = r.Wait(ctx)
			}
			if err != nil {
				return err
			}
			s.a.ReleaseXferReq(r)
		}
		prep := time.Since(t0)
		ids := make([]string, len(blocks))
		for i, b := range blocks {
			ids[i] = strconv.Itoa(b)
		}
		reply := fmt.Sprintf("ready %d %d %s", id, prep.Nanoseconds(), strings.Join(ids, ","))
		if err := s.a.GenNotif(ctx, "decode", []byte(reply)); err != nil {
			return err
		}
	}
}

// result is one request's hand-over.
type result struct {
	tokens int
	bytes  int
	lat    time.Duration
	wrong  int
	is4096 bool
}

func decode(c config, args []string, stdout, stderr io.Writer) error {
	s, err := newSide(c, "decode")
	if err != nil {
		return err
	}
	defer s.close()
	if path := os.Getenv(gocclconfig.TraceFile.Name); path != "" && os.Getenv("KV_HANDOFF_CHILD") == "" {
		if s.rec, err = trace.New(os.Getpid(), 1, trace.ExpandPath(path, os.Getpid())); err != nil {
			return err
		}
		defer s.rec.Close()
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	childArgs := append(slices.Clone(args), "-role", "prefill")
	if c.dir == "" {
		// Prefill's FILE tier: made and removed here, since prefill is
		// killed at the end rather than left to remove it.
		dir, err := os.MkdirTemp("", "kv-handoff-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		childArgs = append(childArgs, "-dir", dir)
	}
	child := exec.Command(exe, childArgs...)
	child.Env = append(os.Environ(), "KV_HANDOFF_CHILD=1")
	child.Stderr = stderr
	in, _ := child.StdinPipe()
	out, _ := child.StdoutPipe()
	if err := child.Start(); err != nil {
		return fmt.Errorf("start prefill: %w", err)
	}
	defer child.Wait()
	defer child.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	blob, derr := base64.StdEncoding.DecodeString(strings.TrimSpace(line))
	if err != nil || derr != nil {
		return fmt.Errorf("no metadata from prefill (%v %v)", err, derr)
	}
	if _, err := s.a.LoadRemoteMetadata(blob); err != nil {
		return err
	}
	fmt.Fprintln(in, base64.StdEncoding.EncodeToString(s.a.LocalMetadata()))
	var pcache, pstage, pfile xfer.Desc
	var dram []xfer.RemoteRegion
	for _, r := range s.a.RemoteRegions("prefill") {
		if r.Type == xfer.FILE {
			pfile = r.Desc
		} else {
			dram = append(dram, r)
		}
	}
	if len(dram) != 2 || pfile.Len == 0 {
		return fmt.Errorf("prefill registered %d DRAM regions and FILE %v (want cache, staging, file)", len(dram), pfile)
	}
	// The cache is prefill's first Alloc: the lower memfd number.
	pcache, pstage = dram[0].Desc, dram[1].Desc
	if dram[0].MemFD > dram[1].MemFD {
		pcache, pstage = pstage, pcache
	}

	rng := rand.New(rand.NewPCG(c.seed, 5))
	lo, hi := math.Log(float64(c.minTok)), math.Log(float64(c.maxTok))
	var lens []int
	for range c.requests {
		lens = append(lens, int(math.Round(math.Exp(lo+rng.Float64()*(hi-lo)))))
	}
	for range c.reps {
		lens = append(lens, 4096)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	bb := c.blockBytes()
	fmt.Fprintf(stdout, "# kv-handoff: %d layers, %d KV heads, head dim %d, %d-token blocks, bf16: %d bytes per block per layer (K and V), %d KiB per token; net %s; %d requests of %d-%d tokens + %d of 4096 per mode\n",
		c.layers, c.heads, c.dim, c.blockTokens, bb, bb/c.blockTokens*c.layers/1024, c.net, c.requests, c.minTok, c.maxTok, c.reps)
	fmt.Fprintf(stdout, "%-8s %9s %11s %11s %11s %11s %8s %13s %12s %6s\n", "mode", "requests", "tokens p50", "MB/req p50", "lat p50 ms", "lat p99 ms", "GB/s", "4096-tok MB", "4096 p50 ms", "wrong")
	id := 0
	for _, mode := range c.modes {
		// One request of the whole pool first, not counted: the first use
		// of a peer's memory maps it (shared memory) or dials it (TCP), and
		// the first pass over memory is several times slower on a VM whose
		// host backs guest memory lazily.
		id++
		rec := s.rec
		s.rec = nil // not traced either
		if _, err := handOver(ctx, c, s, mode, id, c.pool()*c.blockTokens, pcache, pstage, pfile); err != nil {
			return fmt.Errorf("%s warm-up request: %w", mode, err)
		}
		s.rec = rec
		var res []result
		for i, tokens := range lens {
			id++
			r, err := handOver(ctx, c, s, mode, id, tokens, pcache, pstage, pfile)
			if err != nil {
				return fmt.Errorf("%s request %d (%d tokens): %w", mode, id, tokens, err)
			}
			r.is4096 = i >= c.requests
			res = append(res, r)
			if c.verbose {
				fmt.Fprintf(stderr, "%s request %d: %d tokens, %d bytes, %v\n", mode, id, tokens, r.bytes, r.lat)
			}
		}
		printRow(stdout, mode, res)
	}
	s.a.GenNotif(ctx, "prefill", []byte("quit"))
	return nil
}

func handOver(ctx context.Context, c config, s *side, mode string, id, tokens int, pcache, pstage, pfile xfer.Desc) (result, error) {
	tReq := time.Now()
	if err := s.a.GenNotif(ctx, "prefill", []byte(fmt.Sprintf("req %d %d %s", id, tokens, mode))); err != nil {
		return result{}, err
	}
	msg, err := s.a.NextNotif(ctx, "prefill")
	if err != nil {
		return result{}, err
	}
	t0 := time.Now()
	f := strings.Fields(string(msg))
	if len(f) != 4 || f[0] != "ready" || f[1] != strconv.Itoa(id) {
		return result{}, fmt.Errorf("prefill answered %q", msg)
	}
	prepNs, _ := strconv.ParseInt(f[2], 10, 64)
	var remote []int
	for _, v := range strings.Split(f[3], ",") {
		b, _ := strconv.Atoi(v)
		remote = append(remote, b)
	}
	nblk := len(remote)
	bb := c.blockBytes()
	local := c.blocks(nblk, uint64(id)+1<<32)
	done := []byte(fmt.Sprintf("done %d", id))
	var ld, rd []xfer.Desc
	rtype := xfer.DRAM
	switch mode {
	case "staging":
		n := uint64(c.layers * nblk * bb)
		ld, rd = []xfer.Desc{s.stageD.Sub(0, n)}, []xfer.Desc{pstage.Sub(0, n)}
	default:
		src := pcache
		if mode == "file" {
			src, rtype = pfile, xfer.FILE
		}
		for l := range c.layers {
			for j := range nblk {
				ld = append(ld, s.cacheD.Sub(c.off(l, local[j]), uint64(bb)))
				rd = append(rd, src.Sub(c.off(l, remote[j]), uint64(bb)))
			}
		}
	}
	r, err := s.a.CreateXferReq(ctx, xfer.READ, xfer.DRAM, ld, "prefill", rtype, rd, done)
	if err == nil {
		_, err = s.a.PostXferReq(r)
	}
	if err == nil {
		err = r.Wait(ctx)
	}
	if err != nil {
		return result{}, err
	}
	s.a.ReleaseXferReq(r)
	if mode == "staging" { // unpack into the pool's blocks
		for l := range c.layers {
			for j := range nblk {
				memcpy.Copy(s.cache[c.off(l, local[j]):c.off(l, local[j])+uint64(bb)], s.staging[(l*nblk+j)*bb:])
			}
		}
	}
	tLanded := time.Now()
	lat := tLanded.Sub(t0)
	if mode == "staging" {
		lat += time.Duration(prepNs) // prefill's packing
	}
	res := result{tokens: tokens, bytes: c.layers * nblk * bb, lat: lat}
	for l := range c.layers {
		for j := range nblk {
			if !signed(s.cache[c.off(l, local[j]):c.off(l, local[j])+uint64(bb)], id, l, j) {
				res.wrong++
			}
		}
	}
	if s.rec != nil {
		// The serving spans of the request (goccl doctor trace reads
		// them), on this process's clock: prefill is the request to its
		// "ready" (prefill's work and the messages), the KV transfer the
		// READ (and for staging the unpacking), decode the pass that reads
		// every KV byte once, as a first decode step's attention does (here
		// the signature check); the first token follows it.
		end := time.Now()
		for _, sp := range []trace.Event{
			{Name: "request", Start: tReq, End: end},
			{Name: "prefill", Start: tReq, End: t0},
			{Name: "kv transfer", Start: t0, End: tLanded, Path: mode, Bytes: int64(res.bytes)},
			{Name: "decode", Start: tLanded, End: end},
		} {
			sp.Track, sp.Seq = 1, uint64(id)
			s.rec.Record(&sp)
		}
	}
	return res, nil
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func printRow(w io.Writer, mode string, res []result) {
	var lats, lats4096 []time.Duration
	var toks, sizes []int
	var bytes4096 int
	var total time.Duration
	var moved, wrong int
	for _, r := range res {
		wrong += r.wrong
		if r.is4096 {
			lats4096 = append(lats4096, r.lat)
			bytes4096 = r.bytes
			continue
		}
		lats = append(lats, r.lat)
		toks = append(toks, r.tokens)
		sizes = append(sizes, r.bytes)
		total += r.lat
		moved += r.bytes
	}
	slices.Sort(toks)
	slices.Sort(sizes)
	mid := func(v []int) int {
		if len(v) == 0 {
			return 0
		}
		return v[(len(v)-1)/2]
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d.Microseconds())/1e3) }
	gbs := 0.0
	if total > 0 {
		gbs = float64(moved) / total.Seconds() / 1e9
	}
	p4096 := "-"
	if len(lats4096) > 0 {
		p4096 = ms(pct(lats4096, 0.5))
	}
	fmt.Fprintf(w, "%-8s %9d %11d %11.1f %11s %11s %8.2f %13.1f %12s %6d\n", mode, len(res), mid(toks), float64(mid(sizes))/1e6,
		ms(pct(lats, 0.5)), ms(pct(lats, 0.99)), gbs, float64(bytes4096)/1e6, p4096, wrong)
}
