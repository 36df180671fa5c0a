package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/goccl/goccl"
)

// fakeWorld is an in-process world of goroutine ranks with naive, obviously
// correct collectives, for testing the benchmark without the library. bug,
// when set, may corrupt a rank's result after each collective.
type fakeWorld struct {
	n     int
	mu    sync.Mutex
	round *fakeRound
	bug   func(op string, rank int, recv []byte, extent int, dt goccl.DataType)
}

type fakeRound struct {
	arrived int
	data    [][]byte
	done    chan struct{}
}

type fakeComm struct {
	w    *fakeWorld
	rank int
}

func newFakeWorld(n int) []*fakeComm {
	w := &fakeWorld{n: n}
	cs := make([]*fakeComm, n)
	for i := range cs {
		cs[i] = &fakeComm{w: w, rank: i}
	}
	return cs
}

// exchange gives every rank a copy of what every rank contributed.
func (c *fakeComm) exchange(data []byte) [][]byte {
	w := c.w
	w.mu.Lock()
	if w.round == nil {
		w.round = &fakeRound{data: make([][]byte, w.n), done: make(chan struct{})}
	}
	r := w.round
	r.data[c.rank] = append([]byte(nil), data...)
	r.arrived++
	if r.arrived == w.n {
		w.round = nil
		close(r.done)
	}
	w.mu.Unlock()
	<-r.done
	return r.data
}

func (c *fakeComm) corrupt(op string, recv []byte, extent int, dt goccl.DataType) {
	if c.w.bug != nil {
		c.w.bug(op, c.rank, recv, extent, dt)
	}
}

func (c *fakeComm) Rank() int      { return c.rank }
func (c *fakeComm) Size() int      { return c.w.n }
func (c *fakeComm) LocalRank() int { return c.rank }
func (c *fakeComm) Barrier(ctx context.Context) error {
	c.exchange(nil)
	return nil
}

// reduceInto stores the reduction of element i of every src into dst[j].
func fakeReduce(dt goccl.DataType, op goccl.RedOp, srcs [][]byte, si int, dst []byte, di int) error {
	cd := newCodec(dt)
	if dt.IsFloat() {
		acc := cd.loadFloat(srcs[0], si)
		for _, s := range srcs[1:] {
			v := cd.loadFloat(s, si)
			switch op {
			case goccl.Sum, goccl.Avg:
				acc += v
			case goccl.Prod:
				acc *= v
			case goccl.Min:
				acc = math.Min(acc, v)
			case goccl.Max:
				acc = math.Max(acc, v)
			}
		}
		if op == goccl.Avg {
			acc /= float64(len(srcs))
		}
		cd.storeFloat(dst, di, acc)
		return nil
	}
	if op == goccl.Avg {
		return errors.New("fake: avg on integers")
	}
	acc := cd.loadInt(srcs[0], si)
	for _, s := range srcs[1:] {
		v := cd.loadInt(s, si)
		switch op {
		case goccl.Sum:
			acc += v
		case goccl.Prod:
			acc *= v
		case goccl.Min:
			if intLess(dt, v, acc) {
				acc = v
			}
		case goccl.Max:
			if intLess(dt, acc, v) {
				acc = v
			}
		}
	}
	cd.storeInt(dst, di, acc)
	return nil
}

func (c *fakeComm) AllReduceBytes(ctx context.Context, send, recv []byte, count int, dt goccl.DataType, op goccl.RedOp) error {
	sz := dt.Size()
	all := c.exchange(send[:count*sz])
	for i := 0; i < count; i++ {
		if err := fakeReduce(dt, op, all, i, recv, i); err != nil {
			return err
		}
	}
	c.corrupt("all_reduce", recv, count*sz, dt)
	return nil
}

func (c *fakeComm) BroadcastBytes(ctx context.Context, send, recv []byte, count int, dt goccl.DataType, root int) error {
	sz := dt.Size()
	var mine []byte
	if c.rank == root {
		mine = send[:count*sz]
	}
	all := c.exchange(mine)
	copy(recv[:count*sz], all[root])
	c.corrupt("broadcast", recv, count*sz, dt)
	return nil
}

func (c *fakeComm) ReduceBytes(ctx context.Context, send, recv []byte, count int, dt goccl.DataType, op goccl.RedOp, root int) error {
	sz := dt.Size()
	all := c.exchange(send[:count*sz])
	if c.rank == root {
		for i := 0; i < count; i++ {
			if err := fakeReduce(dt, op, all, i, recv, i); err != nil {
				return err
			}
		}
	}
	c.corrupt("reduce", recv, count*sz, dt)
	return nil
}

func (c *fakeComm) AllGatherBytes(ctx context.Context, send, recv []byte, count int, dt goccl.DataType) error {
	blk := count * dt.Size()
	all := c.exchange(send[:blk])
	for j, d := range all {
		copy(recv[j*blk:(j+1)*blk], d)
	}
	c.corrupt("all_gather", recv, blk*c.w.n, dt)
	return nil
}

func (c *fakeComm) ReduceScatterBytes(ctx context.Context, send, recv []byte, count int, dt goccl.DataType, op goccl.RedOp) error {
	all := c.exchange(send[:count*c.w.n*dt.Size()])
	for i := 0; i < count; i++ {
		if err := fakeReduce(dt, op, all, c.rank*count+i, recv, i); err != nil {
			return err
		}
	}
	c.corrupt("reduce_scatter", recv, count*dt.Size(), dt)
	return nil
}

func (c *fakeComm) AllToAllBytes(ctx context.Context, send, recv []byte, count int, dt goccl.DataType) error {
	blk := count * dt.Size()
	all := c.exchange(send[:blk*c.w.n])
	for j, d := range all {
		copy(recv[j*blk:(j+1)*blk], d[c.rank*blk:(c.rank+1)*blk])
	}
	c.corrupt("alltoall", recv, blk*c.w.n, dt)
	return nil
}

func (c *fakeComm) SendRecvBytes(ctx context.Context, send []byte, sendPeer int, recv []byte, recvPeer int, count int, dt goccl.DataType) error {
	n := count * dt.Size()
	if sendPeer != (c.rank+1)%c.w.n || recvPeer != (c.rank-1+c.w.n)%c.w.n {
		return fmt.Errorf("fake: only the ring pattern is supported (rank %d send %d recv %d)", c.rank, sendPeer, recvPeer)
	}
	all := c.exchange(send[:n])
	copy(recv[:n], all[recvPeer])
	c.corrupt("sendrecv", recv, n, dt)
	return nil
}
