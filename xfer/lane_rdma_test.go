package xfer

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestRDMARefusedResetsQueuePair: an RDMA WRITE into memory the target
// deregistered fails its request naming the agent and the request; the
// queue pair, in error after the refusal, is replaced, so the next request
// to the same peer (its TCP streams untouched) goes by RDMA again on a new
// one and lands.
func TestRDMARefusedResetsQueuePair(t *testing.T) {
	io, to := Options{NoSHM: true}, Options{NoSHM: true}
	io.RDMA, to.RDMA = openDevice(t), openDevice(t)
	ini, tgt := newAgent(t, "ini", io), newAgent(t, "tgt", to)
	src, dst := make([]byte, 64<<10), make([]byte, 64<<10)
	sd, _ := ini.RegisterDRAM(src)
	td, _ := tgt.RegisterDRAM(dst)
	load(t, ini, tgt)
	ctx := ctxT(t)
	r, err := ini.CreateXferReq(ctx, WRITE, DRAM, []Desc{sd}, "tgt", DRAM, []Desc{td}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.chunks[0].lane != r.p.rdma {
		t.Fatal("the request does not go by RDMA")
	}
	fill(src, 1)
	if err := run(t, ini, r); err != nil {
		t.Fatal(err)
	}
	landed(tgt)
	if !bytes.Equal(dst, src) {
		t.Fatal("bytes differ")
	}
	first := r.p.rdma.current()

	// The target deregisters: its rkey no longer opens the memory.
	if err := tgt.DeregisterMem(DRAM, td); err != nil {
		t.Fatal(err)
	}
	err = run(t, ini, r)
	var xe *Error
	if !errors.As(err, &xe) || xe.Agent != "tgt" || xe.Req != r.ID() || !strings.Contains(err.Error(), "refused RDMA WRITE") {
		t.Fatalf("write into deregistered memory: %v", err)
	}
	if err := r.p.usable(); err != nil {
		t.Fatalf("a refused RDMA access failed the peer: %v", err)
	}

	// Registered again: a new queue pair carries the next request.
	dst2 := make([]byte, 64<<10)
	td2, _ := tgt.RegisterDRAM(dst2)
	load(t, ini, tgt)
	r2, err := ini.CreateXferReq(ctx, WRITE, DRAM, []Desc{sd}, "tgt", DRAM, []Desc{td2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	fill(src, 2)
	before := ini.Stats().RDMABytes
	if err := run(t, ini, r2); err != nil {
		t.Fatalf("after the reset: %v", err)
	}
	landed(tgt)
	if !bytes.Equal(dst2, src) {
		t.Fatal("bytes differ after the reset")
	}
	if got := ini.Stats().RDMABytes - before; got != 64<<10 {
		t.Fatalf("after the reset: %d bytes by RDMA, want %d", got, 64<<10)
	}
	if r2.p.rdma.current() == first {
		t.Fatal("the failed queue pair was kept")
	}
}
