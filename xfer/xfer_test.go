package xfer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/etcdtest"
	"github.com/goccl/goccl/rdma"
	"github.com/goccl/goccl/rendezvous"
	_ "github.com/goccl/goccl/rendezvous/etcd" // etcd:// for TestMetadataEtcd
)

// openDevice opens a soft RoCE device on loopback, closed at the end of
// the test (after the agents using it, registered later).
func openDevice(t testing.TB) *rdma.Device {
	t.Helper()
	d, err := rdma.Open("127.0.0.1:0")
	if err != nil {
		t.Skipf("no soft RoCE device here: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func newAgent(t testing.TB, name string, o Options) *Agent {
	t.Helper()
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	a, err := NewAgent(name, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// pair makes an initiator and a target that know each other.
func pair(t testing.TB, o Options) (ini, tgt *Agent) {
	ini, tgt = newAgent(t, "ini", o), newAgent(t, "tgt", o)
	return ini, tgt
}

func load(t testing.TB, a, b *Agent) {
	t.Helper()
	if _, err := a.LoadRemoteMetadata(b.LocalMetadata()); err != nil {
		t.Fatal(err)
	}
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func run(t testing.TB, a *Agent, r *XferReq) error {
	t.Helper()
	st, err := a.PostXferReq(r)
	if err != nil {
		return err
	}
	if st != InProgress && st != Done { // memory copies may be done in Post
		t.Fatalf("post: %v", st)
	}
	return r.Wait(ctxT(t))
}

// TestTransfers moves descriptor lists both ways between two agents over
// each path (TCP; same-host mapped Alloc memory; the agent's own memory),
// with sizes around the chunk size, and checks every byte, notifications
// and status.
func TestTransfers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		o        Options
		alloc    bool // target memory from Alloc (mapped on the same host)
		self     bool
		checksum bool
	}{
		{name: "tcp", o: Options{NoSHM: true, ChunkBytes: 64 << 10, Streams: 3}},
		{name: "tcp-checksum", o: Options{NoSHM: true, ChunkBytes: 64 << 10, Checksum: true}},
		{name: "tcp-alloc-noshm", o: Options{NoSHM: true}, alloc: true},
		{name: "shm", o: Options{ChunkBytes: 64 << 10}, alloc: true},
		{name: "self", o: Options{ChunkBytes: 64 << 10}, self: true},
		{name: "roce", o: Options{NoSHM: true, ChunkBytes: 256 << 10}},
		{name: "roce-alloc", o: Options{ChunkBytes: 256 << 10}, alloc: true}, // RDMA: not mapped, as on another host
	} {
		t.Run(tc.name, func(t *testing.T) {
			io, to := tc.o, tc.o
			if strings.HasPrefix(tc.name, "roce") {
				io.RDMA, to.RDMA = openDevice(t), openDevice(t)
				if tc.alloc {
					io.HostID, to.HostID = "host-a", "host-b"
				}
			}
			ini := newAgent(t, "ini", io)
			tgt := ini
			if !tc.self {
				tgt = newAgent(t, "tgt", to)
			}
			sizes := []int{1, 4096, 64<<10 - 1, 64 << 10, 64<<10 + 1, 1 << 20, 3<<20 + 77}
			total := 0
			for _, n := range sizes {
				total += n
			}
			src := make([]byte, total)
			fill(src, 1)
			var dst []byte
			var err error
			if tc.alloc {
				dst, _, err = tgt.Alloc(total)
			} else {
				dst = make([]byte, total)
				_, err = tgt.RegisterDRAM(dst)
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ini.RegisterDRAM(src); err != nil && !tc.self {
				t.Fatal(err)
			} else if err != nil && tc.self {
				t.Fatal(err)
			}
			if !tc.self {
				load(t, ini, tgt)
			}
			var ld, rd []Desc
			off := 0
			for _, n := range sizes {
				ld = append(ld, Desc{Addr: addrOf(src[off:]), Len: uint64(n)})
				rd = append(rd, Desc{Addr: addrOf(dst[off:]), Len: uint64(n)})
				off += n
			}
			// remote descriptors in reverse order: pairs, not positions, match
			slicesReverse(rd)
			slicesReverse(ld)
			ctx := ctxT(t)
			w, err := ini.CreateXferReq(ctx, WRITE, DRAM, ld, tgt.Name(), DRAM, rd, []byte("written"))
			if err != nil {
				t.Fatal(err)
			}
			if st, _ := ini.XferStatus(w); st != Prepared {
				t.Fatalf("status before post: %v", st)
			}
			if err := run(t, ini, w); err != nil {
				t.Fatal(err)
			}
			if st, err := ini.XferStatus(w); st != Done || err != nil {
				t.Fatalf("status: %v %v", st, err)
			}
			landed(tgt)
			if !bytes.Equal(src, dst) {
				t.Fatalf("WRITE: %d of %d bytes differ", diff(src, dst), total)
			}
			if err := tgt.WaitNotif(ctx, "ini", []byte("written")); err != nil {
				t.Fatal(err)
			}
			// READ back into a cleared source, twice (a request is reposted).
			ll, err := ini.PrepXferDlist(ctx, "", DRAM, ld)
			if err != nil {
				t.Fatal(err)
			}
			rl, err := ini.PrepXferDlist(ctx, tgt.Name(), DRAM, rd)
			if err != nil {
				t.Fatal(err)
			}
			rr, err := ini.MakeXferReq(READ, ll, seq(len(ld)), rl, seq(len(rd)), []byte("read"))
			if err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				landed(tgt)
				fill(dst, uint64(10+i))
				published(tgt)
				clear(src)
				if err := run(t, ini, rr); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(src, dst) {
					t.Fatalf("READ %d: %d of %d bytes differ", i, diff(src, dst), total)
				}
				if err := tgt.WaitNotif(ctx, "ini", []byte("read")); err != nil {
					t.Fatal(err)
				}
			}
			if err := ini.ReleaseXferReq(rr); err != nil {
				t.Fatal(err)
			}
			if _, err := ini.PostXferReq(rr); !errors.Is(err, ErrBadRequest) {
				t.Fatalf("post after release: %v", err)
			}
			if n := tgt.GetNotifs(); len(n) != 0 {
				t.Fatalf("notifications left: %q", n)
			}
			// Each path carried the bytes: 3 transfers of total bytes.
			st := ini.Stats()
			want := uint64(3 * total)
			var got uint64
			switch {
			case tc.self:
				got = st.LocalBytes
			case tc.name == "shm":
				got = st.SHMBytes
			case strings.HasPrefix(tc.name, "roce"):
				got = st.RDMABytes
			default:
				got = st.TCPBytes
				if tgt.Stats().ServedBytes != want {
					t.Errorf("target served %d bytes, want %d", tgt.Stats().ServedBytes, want)
				}
			}
			if got != want || st.Requests != 3 || st.Failed != 0 {
				t.Errorf("stats %+v: want %d bytes on the %s path, 3 requests", st, want, tc.name)
			}
		})
	}
}

// landed orders, for the race detector, what a's target side did with its
// memory before the answers the test saw (TCP or UDP orders it for the
// program; the detector does not see through sockets): the serve loops
// count served bytes atomically after each write into memory and release
// a registration (atomically) after sending from it; the RoCE device
// writes under its lock.
func landed(a *Agent) {
	_ = a.Stats()
	if a.dev != nil { // the soft RoCE device writes memory under its lock
		a.dev.Stats()
	}
	a.mu.RLock()
	for _, r := range a.reg.regs {
		r.busy.Load()
	}
	a.mu.RUnlock()
}

// published orders the test's writes into a's memory before a's target
// side reads it (the serve loops take a.mu to find a registration).
func published(a *Agent) {
	a.mu.Lock()
	a.mu.Unlock()
	if a.dev != nil { // and RDMA READs of it read under the device's lock
		a.dev.Stats()
	}
}

func slicesReverse(d []Desc) {
	for i, j := 0, len(d)-1; i < j; i, j = i+1, j-1 {
		d[i], d[j] = d[j], d[i]
	}
}

func diff(a, b []byte) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

// TestFileTier writes DRAM blocks to a FILE region and reads them back:
// the agent's own file (pread/pwrite, with and without O_DIRECT) and a
// remote agent's file over TCP.
func TestFileTier(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remote bool
		direct bool
	}{{"local", false, false}, {"local-direct", false, true}, {"remote", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			ini := newAgent(t, "ini", Options{ChunkBytes: 16 << 10})
			owner := ini
			if tc.remote {
				owner = newAgent(t, "tgt", Options{})
			}
			const block, nblk = 8192, 37
			f, err := OpenFile(filepath.Join(t.TempDir(), "tier"), block*nblk, tc.direct)
			if err != nil {
				if tc.direct {
					t.Skipf("O_DIRECT here: %v", err)
				}
				t.Fatal(err)
			}
			defer f.Close()
			fd, err := owner.RegisterFile(f, 0, block*nblk)
			if err != nil {
				t.Fatal(err)
			}
			if tc.remote {
				load(t, ini, owner)
			}
			mem := make([]byte, block*nblk+1) // +1: unaligned blocks for O_DIRECT's bounce path
			fill(mem, 3)
			if _, err := ini.RegisterDRAM(mem); err != nil {
				t.Fatal(err)
			}
			var ld, fdl []Desc
			for i := range nblk {
				ld = append(ld, Desc{Addr: addrOf(mem[1+i*block:]), Len: block})
				fdl = append(fdl, fd.Sub(uint64((nblk-1-i)*block), block)) // reversed in the file
			}
			ctx := ctxT(t)
			w, err := ini.CreateXferReq(ctx, WRITE, DRAM, ld, owner.Name(), FILE, fdl, nil)
			if err != nil {
				if tc.direct && strings.Contains(err.Error(), "EINVAL") {
					t.Skipf("O_DIRECT here: %v", err)
				}
				t.Fatal(err)
			}
			if err := run(t, ini, w); err != nil {
				if tc.direct && errors.Is(err, os.ErrInvalid) {
					t.Skipf("O_DIRECT here: %v", err)
				}
				t.Fatal(err)
			}
			onDisk, err := os.ReadFile(f.Name())
			if err != nil {
				t.Fatal(err)
			}
			for i := range nblk {
				if !bytes.Equal(onDisk[(nblk-1-i)*block:(nblk-i)*block], mem[1+i*block:1+(i+1)*block]) {
					t.Fatalf("block %d differs in the file", i)
				}
			}
			want := append([]byte(nil), mem...)
			clear(mem)
			r, err := ini.CreateXferReq(ctx, READ, DRAM, ld, owner.Name(), FILE, fdl, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := run(t, ini, r); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(mem[1:], want[1:]) {
				t.Fatalf("READ from the file: %d bytes differ", diff(mem[1:], want[1:]))
			}
			if tc.direct {
				_, err := ini.PrepXferDlist(ctx, "", FILE, []Desc{fd.Sub(100, block)})
				if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "multiples of 4096") {
					t.Fatalf("unaligned O_DIRECT descriptor: %v", err)
				}
			}
		})
	}
}

// TestManySmall posts a batch of 4096 descriptors of 64 bytes to 4 KiB
// each way, several requests in flight at once.
func TestManySmall(t *testing.T) {
	ini, tgt := pair(t, Options{NoSHM: true})
	const n = 4096
	src, dst := make([]byte, n*4096), make([]byte, n*4096)
	fill(src, 5)
	ini.RegisterDRAM(src)
	tgt.RegisterDRAM(dst)
	load(t, ini, tgt)
	ctx := ctxT(t)
	var reqs []*XferReq
	for part := range 4 {
		var ld, rd []Desc
		for i := part; i < n; i += 4 {
			sz := uint64(64 << (i % 7))
			ld = append(ld, Desc{Addr: addrOf(src[i*4096:]), Len: sz})
			rd = append(rd, Desc{Addr: addrOf(dst[i*4096:]), Len: sz})
		}
		r, err := ini.CreateXferReq(ctx, WRITE, DRAM, ld, "tgt", DRAM, rd, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ini.PostXferReq(r); err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, r)
	}
	for _, r := range reqs {
		if err := r.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	landed(tgt)
	for i := range n {
		sz := 64 << (i % 7)
		if !bytes.Equal(src[i*4096:i*4096+sz], dst[i*4096:i*4096+sz]) || dst[i*4096+sz] != 0 && sz < 4096 {
			t.Fatalf("descriptor %d (%d bytes) wrong", i, sz)
		}
	}
}

// TestMisuse checks the errors of bad registrations, lists and requests.
func TestMisuse(t *testing.T) {
	ini, tgt := pair(t, Options{NoSHM: true})
	ctx := ctxT(t)
	buf := make([]byte, 1<<16)
	d, err := ini.RegisterDRAM(buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ini.RegisterDRAM(buf[100:200]); !errors.Is(err, ErrRegistration) || !strings.Contains(err.Error(), "overlaps") {
		t.Fatalf("overlapping registration: %v", err)
	}
	if _, err := ini.RegisterDRAM(nil); !errors.Is(err, ErrRegistration) {
		t.Fatalf("empty registration: %v", err)
	}
	tb := make([]byte, 1<<16)
	td, _ := tgt.RegisterDRAM(tb)
	load(t, ini, tgt)
	check := func(what string, err error, want error, text string) {
		t.Helper()
		if !errors.Is(err, want) || !strings.Contains(err.Error(), text) {
			t.Fatalf("%s: got %v, want %v containing %q", what, err, want, text)
		}
	}
	_, err = ini.PrepXferDlist(ctx, "", DRAM, []Desc{d.Sub(1<<16-10, 11)})
	check("local past the end", err, ErrNotRegistered, "descriptor 0")
	_, err = ini.PrepXferDlist(ctx, "tgt", DRAM, []Desc{{Addr: td.Addr - 1, Len: 10}})
	check("remote before the start", err, ErrNotRegistered, `agent "tgt"`)
	_, err = ini.PrepXferDlist(ctx, "nobody", DRAM, []Desc{d})
	check("unknown agent", err, ErrUnknownAgent, `"nobody"`)
	_, err = ini.PrepXferDlist(ctx, "tgt", DRAM, nil)
	check("empty list", err, ErrBadRequest, "no descriptors")
	ll, _ := ini.PrepXferDlist(ctx, "", DRAM, []Desc{d.Sub(0, 100), d.Sub(100, 100)})
	rl, _ := ini.PrepXferDlist(ctx, "tgt", DRAM, []Desc{td.Sub(0, 100), td.Sub(100, 99)})
	_, err = ini.MakeXferReq(WRITE, ll, []int{0, 1}, rl, []int{0, 1}, nil)
	check("length mismatch", err, ErrBadRequest, "pair 1: local descriptor 1 has 100 bytes, remote 1 has 99")
	_, err = ini.MakeXferReq(WRITE, ll, []int{0, 2}, rl, []int{0, 1}, nil)
	check("index out of range", err, ErrBadRequest, "index 2 of 2 local")
	_, err = ini.MakeXferReq(WRITE, rl, []int{0}, ll, []int{0}, nil)
	check("remote list as local", err, ErrBadRequest, `the local list is agent "tgt"'s`)
	_, err = ini.MakeXferReq(Op(9), ll, []int{0}, rl, []int{0}, nil)
	check("bad op", err, ErrBadRequest, "operation 9")

	// A registration that goes away at the target after the initiator loaded
	// its metadata: the target refuses, the request fails naming it.
	r, err := ini.MakeXferReq(WRITE, ll, []int{0}, rl, []int{0}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tgt.DeregisterMem(DRAM, td); err != nil {
		t.Fatal(err)
	}
	err = run(t, ini, r)
	var xe *Error
	if !errors.As(err, &xe) || xe.Agent != "tgt" || xe.Req != r.ID() || !strings.Contains(err.Error(), "has no DRAM registration") {
		t.Fatalf("write into deregistered memory: %v", err)
	}
	if st, err2 := ini.XferStatus(r); st != Failed || err2 == nil {
		t.Fatalf("status: %v %v", st, err2)
	}
	// The connection survives a refused chunk.
	td2, _ := tgt.RegisterDRAM(tb)
	load(t, ini, tgt)
	r2, err := ini.CreateXferReq(ctx, WRITE, DRAM, []Desc{d.Sub(0, 100)}, "tgt", DRAM, []Desc{td2.Sub(0, 100)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := run(t, ini, r2); err != nil {
		t.Fatal(err)
	}
	if err := ini.DeregisterMem(DRAM, d.Sub(1, 10)); !errors.Is(err, ErrRegistration) {
		t.Fatalf("deregister mid-region: %v", err)
	}
	if _, err := NewAgent("a/b", Options{}); err == nil {
		t.Fatal("agent name with a slash accepted")
	}
	if _, err := NewAgent("x", Options{Streams: 100}); err == nil {
		t.Fatal("100 streams accepted")
	}
	if _, err := ini.LoadRemoteMetadata([]byte("{")); !errors.Is(err, ErrMetadata) {
		t.Fatalf("bad metadata: %v", err)
	}
	if _, err := ini.LoadRemoteMetadata(ini.LocalMetadata()); err == nil {
		t.Fatal("own metadata loaded as a remote's")
	}
}

// TestDeregisterInUse: a registration with a request in flight cannot go.
func TestDeregisterInUse(t *testing.T) {
	ini, tgt := pair(t, Options{NoSHM: true})
	src, dst := make([]byte, 64<<20), make([]byte, 64<<20)
	d, _ := ini.RegisterDRAM(src)
	td, _ := tgt.RegisterDRAM(dst)
	load(t, ini, tgt)
	ctx := ctxT(t)
	r, err := ini.CreateXferReq(ctx, WRITE, DRAM, []Desc{d}, "tgt", DRAM, []Desc{td}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ini.PostXferReq(r); err != nil {
		t.Fatal(err)
	}
	if err := ini.DeregisterMem(DRAM, d); !errors.Is(err, ErrInUse) {
		if st, _ := ini.XferStatus(r); st == InProgress {
			t.Fatalf("deregister during a transfer: %v", err)
		}
	}
	if err := ini.ReleaseXferReq(r); !errors.Is(err, ErrInUse) {
		if st, _ := ini.XferStatus(r); st == InProgress {
			t.Fatalf("release during a transfer: %v", err)
		}
	}
	if err := r.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ini.DeregisterMem(DRAM, d); err != nil {
		t.Fatal(err)
	}
}

// TestInvalidate: requests to an invalidated agent fail naming it; after
// loading its metadata again they work.
func TestInvalidate(t *testing.T) {
	ini, tgt := pair(t, Options{NoSHM: true})
	src, dst := make([]byte, 1024), make([]byte, 1024)
	d, _ := ini.RegisterDRAM(src)
	td, _ := tgt.RegisterDRAM(dst)
	load(t, ini, tgt)
	ctx := ctxT(t)
	r, err := ini.CreateXferReq(ctx, WRITE, DRAM, []Desc{d}, "tgt", DRAM, []Desc{td}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := run(t, ini, r); err != nil {
		t.Fatal(err)
	}
	if err := ini.InvalidateRemote("tgt"); err != nil {
		t.Fatal(err)
	}
	_, err = ini.PostXferReq(r)
	if !errors.Is(err, ErrInvalidated) || !strings.Contains(err.Error(), `"tgt"`) {
		t.Fatalf("post to an invalidated agent: %v", err)
	}
	if err := ini.InvalidateRemote("tgt"); !errors.Is(err, ErrUnknownAgent) {
		t.Fatalf("invalidate twice: %v", err)
	}
	if _, err := ini.PrepXferDlist(ctx, "tgt", DRAM, []Desc{td}); !errors.Is(err, ErrUnknownAgent) {
		t.Fatalf("prepare for an invalidated agent: %v", err)
	}
	load(t, ini, tgt)
	r, err = ini.CreateXferReq(ctx, WRITE, DRAM, []Desc{d}, "tgt", DRAM, []Desc{td}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := run(t, ini, r); err != nil {
		t.Fatal(err)
	}
}

// TestMetadataStore publishes and fetches metadata through goccl's TCP
// store (the first request fetches an unknown agent), and withdraws it.
func TestMetadataStore(t *testing.T) {
	srv, err := rendezvous.NewTCPServer("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	testStore(t, "tcp://"+srv.Addr())
}

// testStore runs agents on the store at url ("": GOCCL_XFER_STORE's).
func testStore(t *testing.T, url string) {
	ctx := ctxT(t)
	open := func() rendezvous.Store {
		if url == "" {
			return nil
		}
		s, err := OpenStore(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	ini := newAgent(t, "ini", Options{Store: open(), NoSHM: true})
	tgt := newAgent(t, "tgt", Options{Store: open(), NoSHM: true})
	dst := make([]byte, 4096)
	td, _ := tgt.RegisterDRAM(dst)
	src := make([]byte, 4096)
	fill(src, 9)
	d, _ := ini.RegisterDRAM(src)
	done := make(chan error, 1)
	go func() { // the initiator waits for the target's metadata
		r, err := ini.CreateXferReq(ctx, WRITE, DRAM, []Desc{d}, "tgt", DRAM, []Desc{td}, []byte("hi"))
		if err == nil {
			err = run(t, ini, r)
		}
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := tgt.SendLocalMD(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	landed(tgt)
	if !bytes.Equal(src, dst) {
		t.Fatal("bytes differ")
	}
	if err := tgt.WaitNotif(ctx, "ini", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if err := tgt.InvalidateLocalMD(ctx); err != nil {
		t.Fatal(err)
	}
	ini.InvalidateRemote("tgt")
	if err := ini.FetchRemoteMD(ctx, "tgt"); !errors.Is(err, ErrInvalidated) {
		t.Fatalf("fetch withdrawn metadata: %v", err)
	}
}

// TestMetadataEtcd does the same through a real etcd server (embedded),
// the agents finding it through GOCCL_XFER_STORE.
func TestMetadataEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	t.Setenv("GOCCL_XFER_STORE", srv.URL("xfer-test"))
	testStore(t, "")
}

// TestMixedPaths makes one request whose remote descriptors lie in a
// mapped Alloc region and in a plain registration (TCP), in both orders,
// and with RDMA for the plain one: every byte lands, each path counted.
func TestMixedPaths(t *testing.T) {
	for _, roce := range []bool{false, true} {
		o := Options{ChunkBytes: 64 << 10}
		io, to := o, o
		if roce {
			io.RDMA, to.RDMA = openDevice(t), openDevice(t)
		}
		ini, tgt := newAgent(t, "ini", io), newAgent(t, "tgt", to)
		mapped, md, err := tgt.Alloc(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		plain := make([]byte, 1<<20)
		pd, _ := tgt.RegisterDRAM(plain)
		src := make([]byte, 2<<20)
		sd, _ := ini.RegisterDRAM(src)
		load(t, ini, tgt)
		ctx := ctxT(t)
		for order := range 2 {
			fill(src, uint64(20+order))
			rd := []Desc{md, pd}
			if order == 1 {
				rd = []Desc{pd, md}
			}
			r, err := ini.CreateXferReq(ctx, WRITE, DRAM, []Desc{sd.Sub(0, 1<<20), sd.Sub(1<<20, 1<<20)}, "tgt", DRAM, rd, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := run(t, ini, r); err != nil {
				t.Fatalf("roce %v, order %d: %v", roce, order, err)
			}
			landed(tgt)
			first, second := mapped, plain
			if order == 1 {
				first, second = plain, mapped
			}
			if !bytes.Equal(first, src[:1<<20]) || !bytes.Equal(second, src[1<<20:]) {
				t.Fatalf("roce %v, order %d: bytes differ", roce, order)
			}
		}
		st := ini.Stats()
		other := st.TCPBytes
		if roce {
			other = st.RDMABytes
		}
		if st.SHMBytes != 2<<20 || other != 2<<20 {
			t.Fatalf("roce %v: stats %+v: want 2 MiB mapped and 2 MiB on the other path", roce, st)
		}
	}
}

// TestStaleRegistrations: registrations and peers that go between
// preparing, making and posting a request fail it with an error (no
// crash, no request reported done), and a region allocated again at the
// same address is not confused with the old one.
func TestStaleRegistrations(t *testing.T) {
	ini, tgt := pair(t, Options{})
	ctx := ctxT(t)
	buf, bd, err := ini.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	_, td, _ := tgt.Alloc(1 << 20)
	load(t, ini, tgt)
	r, err := ini.CreateXferReq(ctx, WRITE, DRAM, []Desc{bd}, "tgt", DRAM, []Desc{td}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := run(t, ini, r); err != nil {
		t.Fatal(err)
	}
	// The local region goes between Make and Post.
	ll, _ := ini.PrepXferDlist(ctx, "", DRAM, []Desc{bd})
	if err := ini.DeregisterMem(DRAM, bd); err != nil {
		t.Fatal(err)
	}
	_ = buf
	st, err := ini.PostXferReq(r)
	if st != Failed || !errors.Is(err, ErrNotRegistered) {
		t.Fatalf("post after deregistering the source: %v %v", st, err)
	}
	if st, err2 := ini.XferStatus(r); st != Failed || err2 == nil {
		t.Fatalf("status after a failed post: %v %v", st, err2)
	}
	if err := r.Wait(ctx); !errors.Is(err, ErrNotRegistered) {
		t.Fatalf("wait after a failed post: %v", err)
	}
	// ... and between Prep and Make.
	rl, _ := ini.PrepXferDlist(ctx, "tgt", DRAM, []Desc{td})
	if _, err := ini.MakeXferReq(WRITE, ll, []int{0}, rl, []int{0}, nil); !errors.Is(err, ErrNotRegistered) {
		t.Fatalf("make with a deregistered source: %v", err)
	}
	// The peer's mapped memory goes between Prep and Make.
	_, bd2, _ := ini.Alloc(1 << 20)
	ll2, _ := ini.PrepXferDlist(ctx, "", DRAM, []Desc{bd2})
	ini.InvalidateRemote("tgt")
	if _, err := ini.MakeXferReq(WRITE, ll2, []int{0}, rl, []int{0}, nil); !errors.Is(err, ErrInvalidated) {
		t.Fatalf("make after the peer was invalidated: %v", err)
	}
	// Within one agent, the destination goes between two posts.
	_, s1, _ := ini.Alloc(1 << 20)
	_, s2, _ := ini.Alloc(1 << 20)
	self, err := ini.CreateXferReq(ctx, WRITE, DRAM, []Desc{s1}, "", DRAM, []Desc{s2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := run(t, ini, self); err != nil {
		t.Fatal(err)
	}
	if err := ini.DeregisterMem(DRAM, s2); err != nil {
		t.Fatal(err)
	}
	if st, err := ini.PostXferReq(self); st != Failed || !errors.Is(err, ErrNotRegistered) {
		t.Fatalf("post into this agent's deregistered memory: %v %v", st, err)
	}
	// The target frees its region and allocates one of the same size
	// (often at the same address): after reloading its metadata, a WRITE
	// lands in the new one.
	if err := tgt.DeregisterMem(DRAM, td); err != nil {
		t.Fatal(err)
	}
	fresh, td2, _ := tgt.Alloc(1 << 20)
	t.Logf("allocated again at the same address: %v", td2.Addr == td.Addr)
	load(t, ini, tgt)
	src := make([]byte, 1<<20)
	fill(src, 33)
	sd, _ := ini.RegisterDRAM(src)
	r2, err := ini.CreateXferReq(ctx, WRITE, DRAM, []Desc{sd}, "tgt", DRAM, []Desc{td2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := run(t, ini, r2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fresh, src) {
		t.Fatalf("the WRITE did not land in the region allocated again (same address: %v)", td2.Addr == td.Addr)
	}
}

// TestMapFile shares an mmap'ed file between agents on one host: the
// initiator maps the target's file pages and writes into them (no
// connection in the data path); the bytes are in the file.
func TestMapFile(t *testing.T) {
	ini, tgt := pair(t, Options{})
	path := filepath.Join(t.TempDir(), "shared.dat")
	f, err := OpenFile(path, 3<<20, false)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, _, err := tgt.MapFile(f, 100, 4096); !errors.Is(err, ErrRegistration) {
		t.Fatalf("unaligned offset: %v", err)
	}
	if _, _, err := tgt.MapFile(f, 2<<20, 2<<20); !errors.Is(err, ErrRegistration) {
		t.Fatalf("past the end: %v", err)
	}
	mem, td, err := tgt.MapFile(f, 1<<20, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	src := make([]byte, 1<<20)
	fill(src, 44)
	sd, _ := ini.RegisterDRAM(src)
	load(t, ini, tgt)
	ctx := ctxT(t)
	r, err := ini.CreateXferReq(ctx, WRITE, DRAM, []Desc{sd}, "tgt", DRAM, []Desc{td}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.maps) != 1 {
		t.Fatal("the target's file mapping was not mapped here")
	}
	if err := run(t, ini, r); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mem, src) {
		t.Fatal("the target's mapping differs")
	}
	onDisk, _ := os.ReadFile(path)
	if !bytes.Equal(onDisk[1<<20:2<<20], src) || ini.Stats().SHMBytes != 1<<20 {
		t.Fatalf("the file differs, or the bytes did not go by the mapping (%+v)", ini.Stats())
	}
}

// TestTraceFile: with Options.TraceFile an agent writes each request that
// ends (operation, bytes, the lanes it took, the remote agent) to a goccl
// trace file, complete once Close returns; a request that posts twice is
// two events.
func TestTraceFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		o    Options
		path string
	}{{"tcp", Options{NoSHM: true}, "tcp"}, {"shm", Options{}, "shm"}} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			o.Listen = "127.0.0.1:0"
			o.TraceFile = filepath.Join(dir, tc.name+"-%p.json")
			ini, err := NewAgent("ini", o)
			if err != nil {
				t.Fatal(err)
			}
			tgt := newAgent(t, "tgt", Options{NoSHM: tc.o.NoSHM})
			src := make([]byte, 3<<20)
			dst := make([]byte, 3<<20)
			if tc.name == "shm" { // Alloc memory: mapped by a peer on the same host
				if src, _, err = ini.Alloc(3 << 20); err != nil {
					t.Fatal(err)
				}
				if dst, _, err = tgt.Alloc(3 << 20); err != nil {
					t.Fatal(err)
				}
			} else {
				ini.RegisterDRAM(src)
				tgt.RegisterDRAM(dst)
			}
			load(t, ini, tgt)
			r, err := ini.CreateXferReq(ctxT(t), WRITE, DRAM, []Desc{{Addr: addrOf(src), Len: 3 << 20}}, "tgt", DRAM, []Desc{{Addr: addrOf(dst), Len: 3 << 20}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if err := run(t, ini, r); err != nil {
					t.Fatal(err)
				}
			}
			if err := ini.Close(); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%s-%d.json", tc.name, os.Getpid())))
			if err != nil {
				t.Fatal(err)
			}
			var evs []struct {
				Name, Ph string
				Ts, Dur  float64
				Args     struct {
					Bytes int64  `json:"bytes"`
					Path  string `json:"path"`
					Peer  string `json:"peer"`
				} `json:"args"`
			}
			if err := json.Unmarshal(b, &evs); err != nil {
				t.Fatalf("%v:\n%s", err, b)
			}
			n := 0
			for _, e := range evs {
				if e.Ph == "X" {
					n++
					if e.Name != "WRITE" || e.Args.Bytes != 3<<20 || e.Args.Path != tc.path || e.Dur <= 0 {
						t.Errorf("event %+v, want WRITE of 3 MiB by %s", e, tc.path)
					}
				}
			}
			if n != 2 || !strings.Contains(string(b), `"peer":"tgt"`) {
				t.Errorf("%d transfers in the trace, want 2 naming peer tgt:\n%s", n, b)
			}
		})
	}
}
