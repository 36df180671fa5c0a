package shm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

// The cross-process test re-executes the test binary as rank 1. The child
// learns the ring paths from these variables.
const (
	envChildIn  = "GOCCL_SHM_TEST_CHILD_IN"  // ring the child creates (parent -> child)
	envParentIn = "GOCCL_SHM_TEST_PARENT_IN" // ring the parent created (child -> parent)
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

func TestCrossProcess(t *testing.T) {
	if os.Getenv(envChildIn) != "" {
		t.Skip("in the helper process")
	}
	dir := testDir(t)
	cfg := crossCfg
	cfg.Dir = dir
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
	cmd.Env = append(os.Environ(), envChildIn+"="+childIn, envParentIn+"="+in.Path())
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
		} else if i := bytes.Index(out.Bytes(), []byte("futex sleeps")); i >= 0 {
			line, _, _ := bytes.Cut(out.Bytes()[i:], []byte("\n"))
			t.Logf("child: %s", line)
		}
	}()

	outRing, err := openWhenReady(ctx, childIn)
	if err != nil {
		in.Close()
		t.Fatal(err)
	}
	l := NewLink(0, 1, outRing, in)
	defer l.Close()

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
	in, err := CreateRing(childIn, crossCfg) // absolute path: cfg.Dir unused
	if err != nil {
		t.Fatal(err)
	}
	out, err := OpenRing(parentIn)
	if err != nil {
		t.Fatal(err)
	}
	l := NewLink(1, 0, out, in)
	defer l.Close()
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
