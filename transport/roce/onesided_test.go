package roce

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/goccl/goccl/rdma"
	"github.com/goccl/goccl/transport"
)

// oneSidedPair connects a OneSided on a fresh device to a region of
// size bytes exposed on another.
func oneSidedPair(t *testing.T, size int) (*OneSided, []byte, *rdma.MR, *Domain) {
	t.Helper()
	ld, rd := NewDomain(device(t)), NewDomain(device(t))
	// GOCCL_IB_TIMEOUT's default: a dead peer is found in 8 × 268 ms;
	// 4 × 16.8 ms, as before, also failed a queue pair whose device the
	// race detector and a loaded machine kept from running that long.
	ld.Timeout, ld.RetryCnt = 16, 7
	words := make([]uint64, size/8)
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), size)
	mr, err := rd.Expose(mem)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mr.Dereg)
	a, err := ld.NewOneSided(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := rd.NewOneSided(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	t.Cleanup(b.Close)
	ai, bi := a.Info(), b.Info()
	if err := a.Connect(ai, bi); err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(bi, ai); err != nil {
		t.Fatal(err)
	}
	return a, mem, mr, rd
}

// TestOneSided: WRITEs larger than the staging ring, a READ back, a
// FETCH_ADD and an 8-byte WRITE land in order; Quiet returns once all are
// acknowledged; a peer whose device stops answering fails Quiet naming it.
func TestOneSided(t *testing.T) {
	const size = 3 << 20
	o, mem, mr, rd := oneSidedPair(t, size)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	base, key := mr.Addr(), mr.RKey()
	src := make([]byte, size-64)
	for i := range src {
		src[i] = byte(i*7 + i>>12)
	}
	if err := o.Write(ctx, base+64, key, src); err != nil {
		t.Fatal(err)
	}
	if err := o.FetchAdd(ctx, base, key, 5); err != nil {
		t.Fatal(err)
	}
	if err := o.WriteWord(ctx, base+8, key, 0x1122334455667788); err != nil {
		t.Fatal(err)
	}
	if err := o.Quiet(ctx); err != nil {
		t.Fatal(err)
	}
	w0 := (*atomic.Uint64)(unsafe.Pointer(&mem[0]))
	w1 := (*atomic.Uint64)(unsafe.Pointer(&mem[8]))
	if w0.Load() != 5 || w1.Load() != 0x1122334455667788 {
		t.Fatalf("words %#x %#x", w0.Load(), w1.Load())
	}
	got := make([]byte, size-64)
	if err := o.Read(ctx, base+64, key, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src) || !bytes.Equal(mem[64:], src) {
		t.Fatal("WRITE or READ data differs")
	}
	if binary.LittleEndian.Uint64(mem[8:]) != 0x1122334455667788 {
		t.Fatal("word 1")
	}
	// The peer's device goes away: the next operations fail, naming peer 1.
	rd.Device().Close()
	o.WriteWord(ctx, base+8, key, 1)
	err := o.Quiet(ctx)
	var lost *transport.LostError
	if !errors.As(err, &lost) || lost.Rank != 1 || !strings.Contains(err.Error(), "stopped acknowledging") {
		t.Fatalf("Quiet with the peer gone: %v", err)
	}
	if err := o.Write(ctx, base, key, src[:10]); !errors.As(err, &lost) {
		t.Fatalf("Write after the failure: %v", err)
	}
}
