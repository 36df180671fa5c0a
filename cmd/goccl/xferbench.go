package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/goccl/goccl/rdma"
	"github.com/goccl/goccl/xfer"
)

func init() {
	register(&command{
		name:    "xferbench",
		summary: "block-transfer benchmark of the xfer agent (nixlbench's role)",
		usage:   "goccl xferbench [--backend tcp|shm|posix] [--op WRITE|READ] [--target-seg DRAM|FILE] [-b MIN] [-e MAX] [--start-batch N] [--max-batch N] ...",
		run:     runXferbench,
	})
}

var xferbenchHelp = `usage: goccl xferbench [flags]

Measures transfers between two xfer agents (package xfer) as NVIDIA's
nixlbench does: for each block size (doubling from -b to -e) and batch
size (doubling from --start-batch to --max-batch), one request of BATCH
descriptors of BLOCK bytes is made, posted and waited for, ITERS times.

By default the target agent runs in a child process on this host and the
initiator here (metadata passed on the child's standard output). For two
hosts, start --role target on one and --role initiator on the other with
the same --store (etcd://host:2379/prefix or a goccl TCP store host:port).

  --backend B        tcp: TCP between the agents (default); shm: the
                     target's memory from Alloc, mapped and copied by the
                     initiator (same host only); roce: RDMA READ and WRITE
                     between soft RoCE devices (--rdma-addr); posix: one
                     agent, its DRAM to and from its own FILE (pread/pwrite)
  --rdma-addr A      IP:port the soft RoCE device opens on (default
                     127.0.0.1:0; with --role, this host's address)
  --op OP            WRITE (initiator to target, default) or READ
  --target-seg T     DRAM (default) or FILE (the target serves a file:
                     --file, default a temporary file)
  --file PATH        the FILE tier's file (created, truncated to size)
  --direct           open the file with O_DIRECT
  -b, --start-block  smallest block size (default 4K; K, M, G suffixes)
  -e, --max-block    largest block size (default 64M)
  --start-batch N    smallest batch (default 1)
  --max-batch N      largest batch (default 1)
  --total-buffer S   the most bytes one side allocates (default 1G): a
                     block × batch above it is skipped
  -n, --iters N      iterations per row (default 1000), fewer for large
                     rows: at most --row-bytes per row (default 2G), at
                     least 8
  -w, --warmup N     untimed iterations per row (default 10% of iters)
  --streams N        TCP connections per peer (default 2)
  --workers N        goroutines copying shared memory and files (default 2)
  --chunk S          the largest piece a descriptor is cut into (default 1M)
  --checksum         CRC-32C on every TCP chunk
  --check            verify every row's bytes after its iterations
  --role R           initiator or target (with --store; default: both here)
  --store URL        metadata store for --role
  --name NAME        this agent's name with --role (default xb-initiator
                     or xb-target)
  --peer NAME        the target's name, for --role initiator (default xb-target)

Columns (nixlbench's): Block Size (B), Batch Size, B/W (GB/Sec) = bytes
moved / time from post to completion summed over the timed iterations
(GB = 1e9 bytes), Avg Lat. (us) = that time per iteration, Avg Prep (us)
= preparing both descriptor lists and making the request, Avg Post (us)
= PostXferReq, Avg Tx (us) = from post's return to completion.
`

type xbOpts struct {
	backend, op, targetSeg, file, role, store, name, peer string
	rdmaAddr                                              string
	direct, checksum, check                               bool
	minBlock, maxBlock, totalBuf, rowBytes, chunk         int64
	minBatch, maxBatch, iters, warmup, streams, workers   int
}

func runXferbench(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("goccl xferbench", stderr, func(fs *cliFlags) { fmt.Fprint(fs.Output(), xferbenchHelp) })
	var o xbOpts
	fs.StringVar(&o.backend, "backend", "tcp", "")
	fs.StringVar(&o.rdmaAddr, "rdma-addr", "127.0.0.1:0", "")
	fs.StringVar(&o.op, "op", "WRITE", "")
	fs.StringVar(&o.targetSeg, "target-seg", "DRAM", "")
	fs.StringVar(&o.file, "file", "", "")
	fs.BoolVar(&o.direct, "direct", false, "")
	minB := fs.StringP("start-block", "b", "4K", "")
	maxB := fs.StringP("max-block", "e", "64M", "")
	fs.IntVar(&o.minBatch, "start-batch", 1, "")
	fs.IntVar(&o.maxBatch, "max-batch", 1, "")
	total := fs.String("total-buffer", "1G", "")
	rowBytes := fs.String("row-bytes", "2G", "")
	fs.IntVarP(&o.iters, "iters", "n", 1000, "")
	fs.IntVarP(&o.warmup, "warmup", "w", -1, "")
	fs.IntVar(&o.streams, "streams", 2, "")
	fs.IntVar(&o.workers, "workers", 2, "")
	chunk := fs.String("chunk", "1M", "")
	fs.BoolVar(&o.checksum, "checksum", false, "")
	fs.BoolVar(&o.check, "check", false, "")
	fs.StringVar(&o.role, "role", "", "")
	fs.StringVar(&o.store, "store", "", "")
	fs.StringVar(&o.name, "name", "", "")
	fs.StringVar(&o.peer, "peer", "xb-target", "")
	if status, exit := fs.parseOrExit(args); exit {
		return status
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "goccl xferbench: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return bad("unexpected arguments %q", fs.Args())
	}
	var err error
	for _, s := range []struct {
		flag string
		v    string
		dst  *int64
	}{{"--start-block", *minB, &o.minBlock}, {"--max-block", *maxB, &o.maxBlock}, {"--total-buffer", *total, &o.totalBuf},
		{"--row-bytes", *rowBytes, &o.rowBytes}, {"--chunk", *chunk, &o.chunk}} {
		if *s.dst, err = parseSize(s.v); err != nil || *s.dst <= 0 {
			return bad("%s %q: want a positive size (4K, 1M, ...)", s.flag, s.v)
		}
	}
	o.op = strings.ToUpper(o.op)
	o.targetSeg = strings.ToUpper(o.targetSeg)
	switch {
	case o.backend != "tcp" && o.backend != "shm" && o.backend != "posix" && o.backend != "roce":
		return bad("--backend %q: want tcp, shm, roce or posix", o.backend)
	case o.backend == "roce" && o.targetSeg == "FILE":
		return bad("--backend roce moves DRAM; a FILE target goes with --backend tcp or posix")
	case o.op != "WRITE" && o.op != "READ":
		return bad("--op %q: want WRITE or READ", o.op)
	case o.targetSeg != "DRAM" && o.targetSeg != "FILE":
		return bad("--target-seg %q: want DRAM or FILE", o.targetSeg)
	case o.backend == "posix" && o.targetSeg != "FILE":
		return bad("--backend posix moves DRAM to and from a FILE: give --target-seg FILE")
	case o.backend == "shm" && o.targetSeg == "FILE":
		return bad("--backend shm maps DRAM; a FILE target goes with --backend tcp or posix")
	case o.minBlock > o.maxBlock:
		return bad("--start-block %d above --max-block %d", o.minBlock, o.maxBlock)
	case o.minBatch < 1 || o.maxBatch < o.minBatch:
		return bad("--start-batch %d, --max-batch %d: want 1 <= start <= max", o.minBatch, o.maxBatch)
	case o.iters < 1:
		return bad("--iters %d: want at least 1", o.iters)
	case o.role != "" && o.role != "initiator" && o.role != "target":
		return bad("--role %q: want initiator or target", o.role)
	case o.role != "" && o.store == "":
		return bad("--role %s needs --store (etcd://host:2379/prefix or host:port)", o.role)
	case o.role != "" && o.backend == "posix":
		return bad("--backend posix runs in one process: no --role")
	case o.direct && o.targetSeg != "FILE":
		return bad("--direct goes with --target-seg FILE")
	}
	opts, err := o.agentOptions()
	if err != nil {
		fmt.Fprintf(stderr, "goccl xferbench: %v\n", err)
		return 1
	}
	defer closeDevice(opts)
	if o.role == "target" {
		return xbTarget(o, opts, stdout, stderr)
	}
	return xbInitiator(o, opts, stdout, stderr)
}

// xbBufBytes is what each side allocates: the largest row that fits.
func (o xbOpts) bufBytes() int64 {
	return min(o.maxBlock*int64(o.maxBatch), o.totalBuf)
}

// agentOptions are the agent's options; with --backend roce it opens the
// soft RoCE device (close it after the agent).
func (o xbOpts) agentOptions() (xfer.Options, error) {
	opts := xfer.Options{Streams: o.streams, Workers: o.workers, ChunkBytes: int(o.chunk), Checksum: o.checksum, NoSHM: o.backend != "shm"}
	if o.backend == "roce" {
		d, err := rdma.Open(o.rdmaAddr)
		if err != nil {
			return opts, fmt.Errorf("--backend roce: %w", err)
		}
		opts.RDMA = d
	}
	return opts, nil
}

func closeDevice(o xfer.Options) {
	if o.RDMA != nil {
		o.RDMA.Close()
	}
}

// xbFill is the target's data pattern, which a READ --check compares with.
func xbFill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b9))
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for k := range 8 {
			b[i+k] = byte(v >> (8 * k))
		}
	}
}

// xbTargetMem registers the target's memory: DRAM (Alloc for shm) or a file.
func xbTargetMem(a *xfer.Agent, o xbOpts) (xfer.MemType, xfer.Desc, func(), error) {
	n := o.bufBytes()
	if o.targetSeg == "FILE" {
		path := o.file
		cleanup := func() {}
		if path == "" {
			dir, err := os.MkdirTemp("", "goccl-xferbench-")
			if err != nil {
				return 0, xfer.Desc{}, nil, err
			}
			path = filepath.Join(dir, "target.dat")
			cleanup = func() { os.RemoveAll(dir) }
		}
		f, err := xfer.OpenFile(path, n, o.direct)
		if err != nil {
			cleanup()
			return 0, xfer.Desc{}, nil, err
		}
		d, err := a.RegisterFile(f, 0, n)
		if err != nil {
			f.Close()
			cleanup()
			return 0, xfer.Desc{}, nil, err
		}
		return xfer.FILE, d, func() { f.Close(); cleanup() }, nil
	}
	var mem []byte
	var d xfer.Desc
	var err error
	if o.backend == "shm" {
		mem, d, err = a.Alloc(int(n))
	} else {
		mem = make([]byte, n)
		d, err = a.RegisterDRAM(mem)
	}
	if err != nil {
		return 0, xfer.Desc{}, nil, err
	}
	xbFill(mem, 1)
	return xfer.DRAM, d, func() {}, nil
}

const xbDone = "xferbench-done"

// xbTarget serves until an initiator says it is done (or, as the child of
// a one-host run, until its standard input closes).
func xbTarget(o xbOpts, opts xfer.Options, stdout, stderr io.Writer) int {
	name := o.name
	if name == "" {
		name = "xb-target"
	}
	ctx := context.Background()
	if o.store != "-" { // "-": the child of a one-host run, metadata on stdout
		st, err := xfer.OpenStore(ctx, o.store)
		if err != nil {
			fmt.Fprintf(stderr, "goccl xferbench: store: %v\n", err)
			return 1
		}
		defer st.Close()
		opts.Store = st
	}
	a, err := xfer.NewAgent(name, opts)
	if err != nil {
		fmt.Fprintf(stderr, "goccl xferbench: %v\n", err)
		return 1
	}
	defer a.Close()
	typ, d, cleanup, err := xbTargetMem(a, o)
	if err != nil {
		fmt.Fprintf(stderr, "goccl xferbench: target memory: %v\n", err)
		return 1
	}
	defer cleanup()
	if opts.Store != nil {
		if err := a.SendLocalMD(ctx); err != nil {
			fmt.Fprintf(stderr, "goccl xferbench: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "goccl xferbench: target %q serving %d bytes of %s\n", name, d.Len, typ)
		for { // until some initiator says it is done
			for _, msgs := range a.GetNotifs() {
				for _, m := range msgs {
					if string(m) == xbDone {
						return 0
					}
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	fmt.Fprintln(stdout, base64.StdEncoding.EncodeToString(a.LocalMetadata()))
	io.Copy(io.Discard, os.Stdin) // the parent closes it when done
	return 0
}

func xbInitiator(o xbOpts, opts xfer.Options, stdout, stderr io.Writer) int {
	ctx := context.Background()
	var err error
	name := o.name
	if name == "" {
		name = "xb-initiator"
	}
	var a *xfer.Agent
	fail := func(format string, args ...any) int {
		fmt.Fprintf(stderr, "goccl xferbench: "+format+"\n", args...)
		return 1
	}
	peer := o.peer
	var rtyp xfer.MemType
	var rdesc xfer.Desc
	switch {
	case o.backend == "posix":
		if a, err = xfer.NewAgent(name, opts); err != nil {
			return fail("%v", err)
		}
		defer a.Close()
		var cleanup func()
		if rtyp, rdesc, cleanup, err = xbTargetMem(a, o); err != nil {
			return fail("file: %v", err)
		}
		defer cleanup()
		peer = name
	case o.role == "initiator":
		st, err := xfer.OpenStore(ctx, o.store)
		if err != nil {
			return fail("store: %v", err)
		}
		defer st.Close()
		opts.Store = st
		if a, err = xfer.NewAgent(name, opts); err != nil {
			return fail("%v", err)
		}
		defer a.Close()
		fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err = a.FetchRemoteMD(fctx, peer)
		cancel()
		if err != nil {
			return fail("%v", err)
		}
		defer func() {
			nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			a.GenNotif(nctx, peer, []byte(xbDone))
		}()
	default: // the target as a child process
		if a, err = xfer.NewAgent(name, opts); err != nil {
			return fail("%v", err)
		}
		defer a.Close()
		self, err := os.Executable()
		if err != nil {
			return fail("%v", err)
		}
		args := []string{"xferbench", "--role", "target", "--store", "-", "--backend", o.backend, "--target-seg", o.targetSeg, "--rdma-addr", o.rdmaAddr,
			"-b", fmt.Sprint(o.minBlock), "-e", fmt.Sprint(o.maxBlock), "--max-batch", fmt.Sprint(o.maxBatch),
			"--total-buffer", fmt.Sprint(o.totalBuf), "--streams", fmt.Sprint(o.streams), "--chunk", fmt.Sprint(o.chunk)}
		if o.file != "" {
			args = append(args, "--file", o.file)
		}
		if o.direct {
			args = append(args, "--direct")
		}
		child := exec.Command(self, args...)
		child.Stderr = stderr
		in, _ := child.StdinPipe()
		out, _ := child.StdoutPipe()
		if err := child.Start(); err != nil {
			return fail("start the target: %v", err)
		}
		defer func() { in.Close(); child.Wait() }()
		line, err := bufio.NewReader(out).ReadString('\n')
		blob, derr := base64.StdEncoding.DecodeString(strings.TrimSpace(line))
		if err != nil || derr != nil {
			return fail("the target printed no metadata (%v)", err)
		}
		if peer, err = a.LoadRemoteMetadata(blob); err != nil {
			return fail("%v", err)
		}
	}
	if o.backend != "posix" {
		var ok bool
		if rtyp, rdesc, ok = xbRemoteRegion(a, peer, o.targetSeg); !ok {
			return fail("agent %q registered no %s memory", peer, o.targetSeg)
		}
	}
	return xbRun(ctx, a, peer, rtyp, rdesc, o, stdout, stderr)
}

// xbRemoteRegion finds the peer's one registration from its metadata.
func xbRemoteRegion(a *xfer.Agent, peer, seg string) (xfer.MemType, xfer.Desc, bool) {
	regs := a.RemoteRegions(peer)
	for _, r := range regs {
		if r.Type.String() == seg {
			return r.Type, r.Desc, true
		}
	}
	return 0, xfer.Desc{}, false
}

func xbRun(ctx context.Context, a *xfer.Agent, peer string, rtyp xfer.MemType, rdesc xfer.Desc, o xbOpts, stdout, stderr io.Writer) int {
	n := o.bufBytes()
	if rdesc.Len < uint64(n) {
		n = int64(rdesc.Len)
	}
	local := make([]byte, n)
	ld, err := a.RegisterDRAM(local)
	if err != nil {
		fmt.Fprintf(stderr, "goccl xferbench: %v\n", err)
		return 1
	}
	xbFill(local, 2)
	op := xfer.WRITE
	if o.op == "READ" {
		op = xfer.READ
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	fmt.Fprintf(w, "# goccl xferbench: backend %s, %s, initiator DRAM, target %s (agent %q), streams %d, chunk %d, checksum %v\n",
		o.backend, o.op, rtyp, peer, o.streams, o.chunk, o.checksum)
	fmt.Fprintf(w, "%-20s%-15s%-15s%-15s%-15s%-15s%-15s\n", "Block Size (B)", "Batch Size", "B/W (GB/Sec)", "Avg Lat. (us)", "Avg Prep (us)", "Avg Post (us)", "Avg Tx (us)")
	fmt.Fprintln(w, strings.Repeat("-", 110))
	w.Flush()
	wrong := 0
	for block := o.minBlock; block <= o.maxBlock; block *= 2 {
		for batch := o.minBatch; batch <= o.maxBatch; batch *= 2 {
			if block*int64(batch) > n {
				fmt.Fprintf(w, "%-20d%-15d(skipped: %d bytes above --total-buffer)\n", block, batch, block*int64(batch))
				continue
			}
			iters := int(min(int64(o.iters), max(8, o.rowBytes/(block*int64(batch)))))
			warm := o.warmup
			if warm < 0 {
				warm = max(1, iters/10)
			}
			lds, rds := make([]xfer.Desc, batch), make([]xfer.Desc, batch)
			for i := range batch {
				off := uint64(int64(i) * block)
				lds[i] = ld.Sub(off, uint64(block))
				rds[i] = rdesc.Sub(off, uint64(block))
			}
			var prep, post, tx time.Duration
			for it := range warm + iters {
				t0 := time.Now()
				r, err := a.CreateXferReq(ctx, op, xfer.DRAM, lds, peer, rtyp, rds, nil)
				if err != nil {
					fmt.Fprintf(stderr, "goccl xferbench: %v\n", err)
					return 1
				}
				t1 := time.Now()
				if _, err := a.PostXferReq(r); err != nil {
					fmt.Fprintf(stderr, "goccl xferbench: %v\n", err)
					return 1
				}
				t2 := time.Now()
				if err := r.Wait(ctx); err != nil {
					fmt.Fprintf(stderr, "goccl xferbench: %v\n", err)
					return 1
				}
				t3 := time.Now()
				a.ReleaseXferReq(r)
				if it >= warm {
					prep += t1.Sub(t0)
					post += t2.Sub(t1)
					tx += t3.Sub(t2)
				}
			}
			lat := (post + tx) / time.Duration(iters)
			bw := float64(block*int64(batch)*int64(iters)) / (post + tx).Seconds() / 1e9
			us := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Nanoseconds())/1e3/float64(iters)) }
			fmt.Fprintf(w, "%-20d%-15d%-15.6f%-15s%-15s%-15s%-15s\n", block, batch, bw,
				fmt.Sprintf("%.1f", float64(lat.Nanoseconds())/1e3), us(prep), us(post), us(tx))
			if o.check {
				if bad := xbCheck(ctx, a, peer, op, rtyp, local, lds, rds, o); bad != "" {
					fmt.Fprintf(w, "# check FAILED: %s\n", bad)
					wrong++
				}
			}
			w.Flush()
		}
	}
	if o.check {
		fmt.Fprintf(w, "# check: %d rows wrong\n", wrong)
	}
	if wrong > 0 {
		return 1
	}
	return 0
}

// xbCheck verifies the bytes of the last row: after WRITEs, reads the
// target's descriptors back and compares with the local ones; after READs,
// compares the local ones with the target's pattern (DRAM) or with a
// second read (FILE).
func xbCheck(ctx context.Context, a *xfer.Agent, peer string, op xfer.Op, rtyp xfer.MemType, local []byte, lds, rds []xfer.Desc, o xbOpts) string {
	span := int(lds[len(lds)-1].Addr + lds[len(lds)-1].Len - lds[0].Addr)
	want := slices.Clone(local[:span])
	if op == xfer.READ && rtyp == xfer.DRAM {
		full := make([]byte, o.bufBytes())
		xbFill(full, 1)
		want = full[rds[0].Addr-rds[0].Addr : span]
		if !bytes.Equal(local[:span], want) {
			return fmt.Sprintf("READ of %d bytes: not the target's pattern", span)
		}
		return ""
	}
	clear(local[:span])
	r, err := a.CreateXferReq(ctx, xfer.READ, xfer.DRAM, lds, peer, rtyp, rds, nil)
	if err == nil {
		_, err = a.PostXferReq(r)
	}
	if err == nil {
		err = r.Wait(ctx)
	}
	if err != nil {
		return err.Error()
	}
	if !bytes.Equal(local[:span], want) {
		return fmt.Sprintf("%d bytes read back differ from what was written", span)
	}
	return ""
}
