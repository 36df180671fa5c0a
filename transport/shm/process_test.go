package shm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

// The cross-process test re-executes the test binary as rank 1. The child
// learns the ring paths from these variables.
const (
	envChildIn  = "GOCCL_SHM_TEST_CHILD_IN"  // ring the child creates (parent -> child)
	envParentIn = "GOCCL_SHM_TEST_PARENT_IN" // ring the parent created (child -> parent)
	envCMA      = "GOCCL_SHM_TEST_CMA"       // Config.CMAThreshold of both sides
)

const crossBytes = 32 << 20

var crossCfg = Config{SlotSize: 64 << 10, Slots: 4}

func crossData(seed uint64) []byte {
	b := make([]byte, crossBytes)
	rand.NewChaCha8([32]byte{byte(seed), 99}).Read(b)
	return b
}

// openWhenReady polls until the peer has created and initialized the ring.
func openWhenReady(ctx context.Context, path string) (*Ring, error) {
	for {
		r, err := OpenRing(path)
		if err == nil {
			return r, nil
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// xorInto is the ReduceFunc of the cross-process test.
func xorInto(d, s []byte) {
	for i := range d {
		d[i] ^= s[i]
	}
}

// TestCrossProcess exchanges 32 MiB both ways with a child process, through
// the slots ("copy") and by Cross Memory Attach ("cma", 64 KiB threshold),
// and checks that the CMA run really read the other process's memory.
func TestCrossProcess(t *testing.T) {
	if os.Getenv(envChildIn) != "" {
		t.Skip("in the helper process")
	}
	t.Run("copy", func(t *testing.T) { testCrossProcess(t, CMADisabled) })
	t.Run("cma", func(t *testing.T) { testCrossProcess(t, 64<<10) })
}

func testCrossProcess(t *testing.T, cmaThreshold int) {
	dir := testDir(t)
	cfg := crossCfg
	cfg.Dir = dir
	cfg.CMAThreshold = cmaThreshold
	in, err := CreateRing(uniqueName(t, "c2p"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(in.Path()) })
	childIn := in.Path()[:len(in.Path())-len("c2p")] + "p2c"
	t.Cleanup(func() { os.Remove(childIn) })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCrossProcessChild$", "-test.v")
	cmd.Env = append(os.Environ(), envChildIn+"="+childIn, envParentIn+"="+in.Path(), envCMA+"="+strconv.Itoa(cmaThreshold))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		in.Close()
		t.Fatal(err)
	}
	defer func() {
		if err := cmd.Wait(); err != nil {
			t.Errorf("child: %v\n%s", err, out.Bytes())
		} else if !bytes.Contains(out.Bytes(), []byte("--- PASS: TestCrossProcessChild")) {
			t.Errorf("child did not run:\n%s", out.Bytes())
		} else {
			for _, key := range []string{"futex sleeps", "CMA messages"} {
				if i := bytes.Index(out.Bytes(), []byte(key)); i >= 0 {
					line, _, _ := bytes.Cut(out.Bytes()[i:], []byte("\n"))
					t.Logf("child: %s", line)
				}
			}
		}
	}()

	outRing, err := openWhenReady(ctx, childIn)
	if err != nil {
		in.Close()
		t.Fatal(err)
	}
	l := NewLink(0, 1, outRing, in)
	defer l.Close()
	recvs := cmaRecvs.Load()

	// Hello and its answer: the child has seen this side's CMA offer (and
	// probed it) before it answers, so the 32 MiB below go by CMA.
	hello := []byte("hello")
	hh := hdr(10, len(hello))
	if err := l.Send(ctx, &hh, hello); err != nil {
		t.Fatal(err)
	}
	if err := l.Recv(ctx, &hh, hello, nil); err != nil || string(hello) != "olleh" {
		t.Fatalf("answer to hello: %v %q", err, hello)
	}

	data := crossData(1)
	h := hdr(1, len(data))
	if err := l.Send(ctx, &h, data); err != nil {
		t.Fatal(err)
	}
	// The child answers with the checksum of what it got, then its own data.
	sum := make([]byte, sha256.Size)
	hs := hdr(2, len(sum))
	if err := l.Recv(ctx, &hs, sum, nil); err != nil {
		t.Fatal(err)
	}
	if want := sha256.Sum256(data); !bytes.Equal(sum, want[:]) {
		t.Fatal("child's checksum of the 32 MiB transfer differs")
	}
	in.Unlink() // the child has certainly mapped it: it sent on it
	got := make([]byte, crossBytes)
	h3 := hdr(3, len(got))
	if err := l.Recv(ctx, &h3, got, nil); err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(got) != sha256.Sum256(crossData(2)) {
		t.Fatal("checksum of the child's 32 MiB transfer differs")
	}
	// The child sends the same data again; this side folds it into a copy
	// of what it got (x ^ x = 0).
	h5 := hdr(5, len(got))
	if err := l.Recv(ctx, &h5, got, xorInto); err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(got) != sha256.Sum256(make([]byte, crossBytes)) {
		t.Fatal("folding the child's 32 MiB transfer in gave a wrong result")
	}
	if n := cmaRecvs.Load() - recvs; (n == 2) != (cmaThreshold >= 0) || (n == 0) != (cmaThreshold < 0) {
		t.Fatalf("%d messages from the child came by CMA (threshold %d)", n, cmaThreshold)
	}
	// Close wakes the child, which is blocked in Recv, across processes.
	l.Close()
}

// TestCrossProcessChild is rank 1 of TestCrossProcess, run in a child process.
func TestCrossProcessChild(t *testing.T) {
	childIn, parentIn := os.Getenv(envChildIn), os.Getenv(envParentIn)
	if childIn == "" {
		t.Skip("helper for TestCrossProcess")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	cfg := crossCfg
	cfg.CMAThreshold, _ = strconv.Atoi(os.Getenv(envCMA))
	in, err := CreateRing(childIn, cfg) // absolute path: cfg.Dir unused
	if err != nil {
		t.Fatal(err)
	}
	out, err := OpenRing(parentIn)
	if err != nil {
		t.Fatal(err)
	}
	l := NewLink(1, 0, out, in)
	defer l.Close()
	recvs := cmaRecvs.Load()
	hello := make([]byte, 5)
	hh := hdr(10, len(hello))
	if err := l.Recv(ctx, &hh, hello, nil); err != nil || string(hello) != "hello" {
		t.Fatalf("hello: %v %q", err, hello)
	}
	copy(hello, "olleh")
	if err := l.Send(ctx, &hh, hello); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, crossBytes)
	h := hdr(1, len(got))
	if err := l.Recv(ctx, &h, got, nil); err != nil {
		t.Fatal(err)
	}
	in.Unlink()
	sum := sha256.Sum256(got)
	hs := hdr(2, len(sum))
	if err := l.Send(ctx, &hs, sum[:]); err != nil {
		t.Fatal(err)
	}
	data := crossData(2)
	h3 := hdr(3, len(data))
	if err := l.Send(ctx, &h3, data); err != nil {
		t.Fatal(err)
	}
	h5 := hdr(5, len(data))
	if err := l.Send(ctx, &h5, data); err != nil {
		t.Fatal(err)
	}
	n := cmaRecvs.Load() - recvs
	t.Logf("CMA messages received by the child: %d", n)
	if (n == 1) != (cfg.CMAThreshold >= 0) || (n == 0) != (cfg.CMAThreshold < 0) {
		t.Fatalf("%d messages from the parent came by CMA (threshold %d)", n, cfg.CMAThreshold)
	}
	// Wait for the parent to close the link: a futex sleep woken by the
	// parent's FUTEX_WAKE (or the timeout).
	sleeps := futexSleeps.Load()
	h4 := hdr(4, 1)
	err = l.Recv(ctx, &h4, make([]byte, 1), nil)
	var pe *transport.PeerError
	if !errors.As(err, &pe) || !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("want ErrClosed from the parent's Close, got %v", err)
	}
	if futexSleeps.Load() == sleeps {
		t.Fatal("waiting for the parent's Close did not sleep on the futex")
	}
	t.Logf("futex sleeps in the child: %d", futexSleeps.Load())
}
