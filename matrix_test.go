package goccl_test

import (
	"context"
	"fmt"
	"math"
	"os"

	"github.com/goccl/goccl"
	"github.com/x448/float16"
)

// The collective matrix: every collective x dtype x op x {out-of-place,
// in-place} x count, each element compared with a value this file computes on
// its own (int64 / float64 arithmetic, never goccl's kernels).

// val is rank r's input at global index i: small integers so that float sums
// and products are exact in every type, including float16 and bfloat16.
func val(dt goccl.DataType, r, i int) int64 {
	v := int64((r*7+i*13)%5) - 1 // -1..3
	switch dt {
	case goccl.Uint8, goccl.Uint32, goccl.Uint64:
		v += 2 // 1..5
	}
	return v
}

// expected reduces val over all ranks at index i, in float64 for float types
// and int64 otherwise (integer wrap happens when converting to the type).
func expected(dt goccl.DataType, op goccl.RedOp, P, i int) float64 {
	acc := float64(val(dt, 0, i))
	iacc := val(dt, 0, i)
	for r := 1; r < P; r++ {
		v := val(dt, r, i)
		switch op {
		case goccl.Sum, goccl.Avg:
			acc += float64(v)
			iacc += v
		case goccl.Prod:
			acc *= float64(v)
			iacc *= v
		case goccl.Min:
			acc = math.Min(acc, float64(v))
			iacc = min(iacc, v)
		case goccl.Max:
			acc = math.Max(acc, float64(v))
			iacc = max(iacc, v)
		}
	}
	if op == goccl.Avg {
		return acc / float64(P)
	}
	if dt.IsFloat() {
		return acc
	}
	return float64(iacc)
}

// conv holds the per-type conversions the checker needs.
type conv[T goccl.Element] struct {
	from func(float64) T
	to   func(T) float64
	tol  float64 // relative tolerance (0 = exact)
}

func convFor[T goccl.Element]() conv[T] {
	var z T
	var c any
	switch any(z).(type) {
	case int8:
		c = conv[int8]{func(f float64) int8 { return int8(int64(f)) }, func(v int8) float64 { return float64(v) }, 0}
	case uint8:
		c = conv[uint8]{func(f float64) uint8 { return uint8(int64(f)) }, func(v uint8) float64 { return float64(v) }, 0}
	case int32:
		c = conv[int32]{func(f float64) int32 { return int32(int64(f)) }, func(v int32) float64 { return float64(v) }, 0}
	case uint32:
		c = conv[uint32]{func(f float64) uint32 { return uint32(int64(f)) }, func(v uint32) float64 { return float64(v) }, 0}
	case int64:
		c = conv[int64]{func(f float64) int64 { return int64(f) }, func(v int64) float64 { return float64(v) }, 0}
	case uint64:
		c = conv[uint64]{func(f float64) uint64 { return uint64(int64(f)) }, func(v uint64) float64 { return float64(v) }, 0}
	case goccl.Float16:
		c = conv[goccl.Float16]{func(f float64) goccl.Float16 { return float16.Fromfloat32(float32(f)) }, func(v goccl.Float16) float64 { return float64(v.Float32()) }, 2e-3}
	case goccl.BFloat16:
		c = conv[goccl.BFloat16]{func(f float64) goccl.BFloat16 { return goccl.BFloat16From(float32(f)) }, func(v goccl.BFloat16) float64 { return float64(v.Float32()) }, 1e-2}
	case float32:
		c = conv[float32]{func(f float64) float32 { return float32(f) }, func(v float32) float64 { return float64(v) }, 1e-6}
	case float64:
		c = conv[float64]{func(f float64) float64 { return f }, func(v float64) float64 { return v }, 1e-12}
	}
	return c.(conv[T])
}

type matrix struct {
	ctx    context.Context
	c      *goccl.Comm
	counts []int
	ops    int
}

// largeCount is the count from which the matrix runs one data type per
// element size only (largeTypes): what a large count adds (chunking,
// pipelining, slots and algorithms chosen by size, striping) depends on
// the element's size, not its type, while every type's reductions and
// conversions run at the smaller counts, whose 1003 or so elements take
// the SIMD kernels through their loops and tails. It halves the matrix's
// time (most of it is the large count).
const largeCount = 100_000

// largeTypes: one per element size, signed and unsigned, integer and
// floating point (Avg) among them.
var largeTypes = map[goccl.DataType]bool{goccl.Int8: true, goccl.BFloat16Type: true, goccl.Float32: true, goccl.Uint64: true}

// countsFor is m.counts less the large ones when dt is not in largeTypes.
func (m *matrix) countsFor(dt goccl.DataType) []int {
	if largeTypes[dt] {
		return m.counts
	}
	var out []int
	for _, n := range m.counts {
		if n < largeCount {
			out = append(out, n)
		}
	}
	return out
}

func (m *matrix) run() error {
	for _, dt := range goccl.DataTypes() {
		var err error
		if os.Getenv("GOCCL_TEST_VCOLL_ONLY") == "1" {
			err = runVColl(m, dt)
			if err != nil {
				return err
			}
			continue
		}
		switch dt {
		case goccl.Int8:
			err = runTyped[int8](m, dt)
		case goccl.Uint8:
			err = runTyped[uint8](m, dt)
		case goccl.Int32:
			err = runTyped[int32](m, dt)
		case goccl.Uint32:
			err = runTyped[uint32](m, dt)
		case goccl.Int64:
			err = runTyped[int64](m, dt)
		case goccl.Uint64:
			err = runTyped[uint64](m, dt)
		case goccl.Float16Type:
			err = runTyped[goccl.Float16](m, dt)
		case goccl.BFloat16Type:
			err = runTyped[goccl.BFloat16](m, dt)
		case goccl.Float32:
			err = runTyped[float32](m, dt)
		case goccl.Float64:
			err = runTyped[float64](m, dt)
		}
		if err == nil {
			err = runVColl(m, dt)
		}
		if err != nil {
			return err
		}
	}
	return m.pointToPoint()
}

// period: val repeats every 5 indices (i*13 mod 5), and so does every
// expectation below; fill and firstWrong convert one period and tile it
// (the matrix spent most of its time converting and reducing per element).
const period = 5

func fill[T goccl.Element](cv conv[T], dt goccl.DataType, buf []T, r, base int) {
	var tile [period]T
	for k := range tile {
		tile[k] = cv.from(float64(val(dt, r, base+k)))
	}
	k := 0
	for i := range buf {
		buf[i] = tile[k]
		if k++; k == period {
			k = 0
		}
	}
}

// firstWrong returns the index of the first element of got that is not
// want(i), or -1: equal to the wanted value as representable in T, within
// cv.tol relative to it (0: exactly). want must repeat every period indices.
func firstWrong[T goccl.Element](cv conv[T], got []T, want func(i int) float64) int {
	var w, lim [period]float64 // the wanted values as representable in T
	for k := range w {
		w[k] = cv.to(cv.from(want(k)))
		lim[k] = cv.tol * math.Max(1, math.Abs(w[k]))
	}
	k := 0
	for i, g := range got {
		if !(math.Abs(cv.to(g)-w[k]) <= lim[k]) { // a NaN is wrong too
			return i
		}
		if k++; k == period {
			k = 0
		}
	}
	return -1
}

func runTyped[T goccl.Element](m *matrix, dt goccl.DataType) error {
	cv := convFor[T]()
	c, ctx := m.c, m.ctx
	P, r := c.Size(), c.Rank()
	for _, count := range m.countsFor(dt) {
		for _, inPlace := range []bool{false, true} {
			where := func(coll string, op any) string {
				return fmt.Sprintf("rank %d %s %v %v count %d inplace %v", r, coll, dt, op, count, inPlace)
			}
			for _, op := range goccl.RedOps() {
				if op == goccl.Avg && !dt.IsFloat() {
					continue
				}
				// AllReduce
				send := make([]T, count)
				fill(cv, dt, send, r, 0)
				recv := send
				if !inPlace {
					recv = make([]T, count)
				}
				m.ops++
				if err := goccl.AllReduce(ctx, c, send, recv, count, op); err != nil {
					return fmt.Errorf("%s: %w", where("AllReduce", op), err)
				}
				if i := firstWrong(cv, recv, func(i int) float64 { return expected(dt, op, P, i) }); i >= 0 {
					return fmt.Errorf("%s: elem %d = %v, want %v", where("AllReduce", op), i, cv.to(recv[i]), expected(dt, op, P, i))
				}
				// Reduce, root rotating
				root := m.ops % P
				send = make([]T, count)
				fill(cv, dt, send, r, 0)
				recv = send
				if !inPlace {
					recv = make([]T, count)
				}
				m.ops++
				if err := goccl.Reduce(ctx, c, send, recv, count, op, root); err != nil {
					return fmt.Errorf("%s root %d: %w", where("Reduce", op), root, err)
				}
				if r == root {
					if i := firstWrong(cv, recv, func(i int) float64 { return expected(dt, op, P, i) }); i >= 0 {
						return fmt.Errorf("%s root %d: elem %d = %v, want %v", where("Reduce", op), root, i, cv.to(recv[i]), expected(dt, op, P, i))
					}
				}
				// ReduceScatter
				send = make([]T, P*count)
				fill(cv, dt, send, r, 0)
				recv = send[r*count : (r+1)*count]
				if !inPlace {
					recv = make([]T, count)
				}
				m.ops++
				if err := goccl.ReduceScatter(ctx, c, send, recv, count, op); err != nil {
					return fmt.Errorf("%s: %w", where("ReduceScatter", op), err)
				}
				if i := firstWrong(cv, recv, func(i int) float64 { return expected(dt, op, P, r*count+i) }); i >= 0 {
					return fmt.Errorf("%s: elem %d = %v, want %v", where("ReduceScatter", op), i, cv.to(recv[i]), expected(dt, op, P, r*count+i))
				}
			}
			// Broadcast
			root := m.ops % P
			send := make([]T, count)
			fill(cv, dt, send, r, 0)
			recv := send
			if !inPlace {
				recv = make([]T, count)
			}
			m.ops++
			if err := goccl.Broadcast(ctx, c, send, recv, count, root); err != nil {
				return fmt.Errorf("%s root %d: %w", where("Broadcast", "-"), root, err)
			}
			if i := firstWrong(cv, recv, func(i int) float64 { return float64(val(dt, root, i)) }); i >= 0 {
				return fmt.Errorf("%s root %d: elem %d = %v, want %v", where("Broadcast", "-"), root, i, cv.to(recv[i]), val(dt, root, i))
			}
			// AllGather
			recv = make([]T, P*count)
			send = make([]T, count)
			if inPlace {
				send = recv[r*count : (r+1)*count]
			}
			fill(cv, dt, send, r, 0)
			m.ops++
			if err := goccl.AllGather(ctx, c, send, recv, count); err != nil {
				return fmt.Errorf("%s: %w", where("AllGather", "-"), err)
			}
			for q := 0; q < P; q++ {
				if i := firstWrong(cv, recv[q*count:(q+1)*count], func(i int) float64 { return float64(val(dt, q, i)) }); i >= 0 {
					return fmt.Errorf("%s: block %d elem %d = %v, want %v", where("AllGather", "-"), q, i, cv.to(recv[q*count+i]), val(dt, q, i))
				}
			}
			// AllToAll
			send = make([]T, P*count)
			fill(cv, dt, send, r, 0)
			recv = send
			if !inPlace {
				recv = make([]T, P*count)
			}
			m.ops++
			if err := goccl.AllToAll(ctx, c, send, recv, count); err != nil {
				return fmt.Errorf("%s: %w", where("AllToAll", "-"), err)
			}
			for q := 0; q < P; q++ {
				if i := firstWrong(cv, recv[q*count:(q+1)*count], func(i int) float64 { return float64(val(dt, q, r*count+i)) }); i >= 0 {
					return fmt.Errorf("%s: block %d elem %d = %v, want %v", where("AllToAll", "-"), q, i, cv.to(recv[q*count+i]), val(dt, q, r*count+i))
				}
			}
			// SendRecv around the ring
			next, prev := (r+1)%P, (r+P-1)%P
			send = make([]T, count)
			fill(cv, dt, send, r, 0)
			recv = make([]T, count)
			m.ops++
			if err := goccl.SendRecv(ctx, c, send, next, recv, prev, count); err != nil {
				return fmt.Errorf("%s: %w", where("SendRecv", "-"), err)
			}
			if i := firstWrong(cv, recv, func(i int) float64 { return float64(val(dt, prev, i)) }); i >= 0 {
				return fmt.Errorf("%s: elem %d = %v, want %v", where("SendRecv", "-"), i, cv.to(recv[i]), val(dt, prev, i))
			}
		}
	}
	return nil
}

// pointToPoint checks that Send/Recv between a pair arrive in order, and Barrier.
func (m *matrix) pointToPoint() error {
	c, ctx := m.c, m.ctx
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if c.Size() < 2 {
		return nil
	}
	const msgs = 5
	switch c.Rank() {
	case 0:
		for k := 0; k < msgs; k++ {
			buf := []int64{int64(k), int64(k * k)}
			if err := goccl.Send(ctx, c, buf, len(buf), 1); err != nil {
				return fmt.Errorf("rank 0 Send #%d: %w", k, err)
			}
		}
	case 1:
		for k := 0; k < msgs; k++ {
			buf := make([]int64, 2)
			if err := goccl.Recv(ctx, c, buf, 2, 0); err != nil {
				return fmt.Errorf("rank 1 Recv #%d: %w", k, err)
			}
			if buf[0] != int64(k) || buf[1] != int64(k*k) {
				return fmt.Errorf("rank 1 Recv #%d got %v: out of order", k, buf)
			}
		}
	}
	return c.Barrier(ctx)
}

// runVColl runs AllToAllv, Gather and Scatter for dt.
func runVColl(m *matrix, dt goccl.DataType) error {
	switch dt {
	case goccl.Int8:
		return runVTyped[int8](m, dt)
	case goccl.Uint8:
		return runVTyped[uint8](m, dt)
	case goccl.Int32:
		return runVTyped[int32](m, dt)
	case goccl.Uint32:
		return runVTyped[uint32](m, dt)
	case goccl.Int64:
		return runVTyped[int64](m, dt)
	case goccl.Uint64:
		return runVTyped[uint64](m, dt)
	case goccl.Float16Type:
		return runVTyped[goccl.Float16](m, dt)
	case goccl.BFloat16Type:
		return runVTyped[goccl.BFloat16](m, dt)
	case goccl.Float32:
		return runVTyped[float32](m, dt)
	case goccl.Float64:
		return runVTyped[float64](m, dt)
	}
	return fmt.Errorf("no AllToAllv test for %v", dt)
}

// vCount is how many elements rank src sends rank dst in the AllToAllv
// matrix: rank-dependent, and zero for some pairs at every count.
func vCount(src, dst, count int) int { return (count*(src+1) + 3*dst) % (count + 2) }

// vLayout places the blocks of sizes cnt(0..P-1) in reverse rank order,
// each after a one-element gap; it returns the displacements and the
// elements spanned.
func vLayout(P int, cnt func(p int) int) (displs []int, span int) {
	displs = make([]int, P)
	for p := P - 1; p >= 0; p-- {
		span++
		displs[p] = span
		span += cnt(p)
	}
	return displs, span
}

// blockingOrNot runs the blocking form of an operation, or (nb) its I form
// and waits for the Request.
func blockingOrNot(ctx context.Context, nb bool, blocking func() error, issue func() (goccl.Request, error)) error {
	if !nb {
		return blocking()
	}
	req, err := issue()
	if err != nil {
		return err
	}
	return req.Wait(ctx)
}

func runVTyped[T goccl.Element](m *matrix, dt goccl.DataType) error {
	cv := convFor[T]()
	c, ctx := m.c, m.ctx
	P, r := c.Size(), c.Rank()
	for ci, count := range m.countsFor(dt) {
		// Every other count runs the non-blocking forms (IAllToAllv,
		// IGather, IScatter), waited for at once.
		nb := ci%2 == 1
		for _, inPlace := range []bool{false, true} {
			where := func(coll string) string {
				return fmt.Sprintf("rank %d %s %v count %d inplace %v nonblocking %v", r, coll, dt, count, inPlace, nb)
			}
			// AllToAllv: uneven counts, scattered displacements; in place
			// is one buffer for both sides.
			sc, rc := make([]int, P), make([]int, P)
			for p := 0; p < P; p++ {
				sc[p], rc[p] = vCount(r, p, count), vCount(p, r, count)
			}
			sd, sspan := vLayout(P, func(p int) int { return sc[p] })
			rd, rspan := vLayout(P, func(p int) int { return rc[p] })
			send := make([]T, sspan)
			recv := make([]T, rspan)
			if inPlace {
				send = make([]T, max(sspan, rspan))
				recv = send
			}
			fill(cv, dt, send, r, 0)
			m.ops++
			if err := blockingOrNot(ctx, nb, func() error { return goccl.AllToAllv(ctx, c, send, sc, sd, recv, rc, rd) },
				func() (goccl.Request, error) { return goccl.IAllToAllv(ctx, c, send, sc, sd, recv, rc, rd) }); err != nil {
				return fmt.Errorf("%s: %w", where("AllToAllv"), err)
			}
			for q := 0; q < P; q++ {
				qd, _ := vLayout(P, func(p int) int { return vCount(q, p, count) })
				if i := firstWrong(cv, recv[rd[q]:rd[q]+rc[q]], func(i int) float64 { return float64(val(dt, q, qd[r]+i)) }); i >= 0 {
					return fmt.Errorf("%s: from rank %d elem %d = %v, want %v", where("AllToAllv"), q, i, cv.to(recv[rd[q]+i]), val(dt, q, qd[r]+i))
				}
			}
			// Gather, root rotating; in place: the root's send is its block.
			root := m.ops % P
			send = make([]T, count)
			recv = nil
			if r == root {
				recv = make([]T, P*count)
				if inPlace {
					send = recv[r*count : (r+1)*count]
				}
			}
			fill(cv, dt, send, r, 0)
			m.ops++
			if err := blockingOrNot(ctx, nb, func() error { return goccl.Gather(ctx, c, send, recv, count, root) },
				func() (goccl.Request, error) { return goccl.IGather(ctx, c, send, recv, count, root) }); err != nil {
				return fmt.Errorf("%s root %d: %w", where("Gather"), root, err)
			}
			for q := 0; q < P && r == root; q++ {
				if i := firstWrong(cv, recv[q*count:(q+1)*count], func(i int) float64 { return float64(val(dt, q, i)) }); i >= 0 {
					return fmt.Errorf("%s root %d: block %d elem %d = %v, want %v", where("Gather"), root, q, i, cv.to(recv[q*count+i]), val(dt, q, i))
				}
			}
			// Scatter, root rotating; in place: the root's recv is its block.
			root = m.ops % P
			send = nil
			recv = make([]T, count)
			if r == root {
				send = make([]T, P*count)
				fill(cv, dt, send, r, 0)
				if inPlace {
					recv = send[r*count : (r+1)*count]
				}
			}
			m.ops++
			if err := blockingOrNot(ctx, nb, func() error { return goccl.Scatter(ctx, c, send, recv, count, root) },
				func() (goccl.Request, error) { return goccl.IScatter(ctx, c, send, recv, count, root) }); err != nil {
				return fmt.Errorf("%s root %d: %w", where("Scatter"), root, err)
			}
			if i := firstWrong(cv, recv, func(i int) float64 { return float64(val(dt, root, r*count+i)) }); i >= 0 {
				return fmt.Errorf("%s root %d: elem %d = %v, want %v", where("Scatter"), root, i, cv.to(recv[i]), val(dt, root, r*count+i))
			}
			if inPlace {
				continue
			}
			// AllToAllSingle: the AllToAllv counts, packed in rank order.
			send, recv = make([]T, sum(sc)), make([]T, sum(rc))
			fill(cv, dt, send, r, 0)
			m.ops++
			if err := blockingOrNot(ctx, nb, func() error { return goccl.AllToAllSingle(ctx, c, send, sc, recv, rc) },
				func() (goccl.Request, error) { return goccl.IAllToAllSingle(ctx, c, send, sc, recv, rc) }); err != nil {
				return fmt.Errorf("%s: %w", where("AllToAllSingle"), err)
			}
			for q, off := 0, 0; q < P; q++ {
				qoff := 0 // where rank q's chunk for this rank starts in q's sendbuf
				for p := 0; p < r; p++ {
					qoff += vCount(q, p, count)
				}
				if i := firstWrong(cv, recv[off:off+rc[q]], func(i int) float64 { return float64(val(dt, q, qoff+i)) }); i >= 0 {
					return fmt.Errorf("%s: from rank %d elem %d = %v, want %v", where("AllToAllSingle"), q, i, cv.to(recv[off+i]), val(dt, q, qoff+i))
				}
				off += rc[q]
			}
			if err := runCoalesced(m, cv, dt, count, nb); err != nil {
				return err
			}
		}
	}
	return nil
}

func sum(v []int) (s int) {
	for _, x := range v {
		s += x
	}
	return s
}

// runCoalesced checks AllGatherCoalesced and ReduceScatterCoalesced on
// three buffers of count, 3 and 1 elements (each filled from its own base
// index), every reduction for ReduceScatter; nb: the I forms.
func runCoalesced[T goccl.Element](m *matrix, cv conv[T], dt goccl.DataType, count int, nb bool) error {
	c, ctx := m.c, m.ctx
	P, r := c.Size(), c.Rank()
	counts, bases := []int{count, 3, 1}, []int{0, 2, 4}
	where := func(coll string, op any) string {
		return fmt.Sprintf("rank %d %s %v %v counts %v nonblocking %v", r, coll, dt, op, counts, nb)
	}
	sends, recvs := make([][]T, len(counts)), make([][]T, len(counts))
	for i, n := range counts {
		sends[i], recvs[i] = make([]T, n), make([]T, P*n)
		fill(cv, dt, sends[i], r, bases[i])
	}
	m.ops++
	if err := blockingOrNot(ctx, nb, func() error { return goccl.AllGatherCoalesced(ctx, c, sends, recvs) },
		func() (goccl.Request, error) { return goccl.IAllGatherCoalesced(ctx, c, sends, recvs) }); err != nil {
		return fmt.Errorf("%s: %w", where("AllGatherCoalesced", "-"), err)
	}
	for i, n := range counts {
		for q := 0; q < P; q++ {
			if j := firstWrong(cv, recvs[i][q*n:(q+1)*n], func(j int) float64 { return float64(val(dt, q, bases[i]+j)) }); j >= 0 {
				return fmt.Errorf("%s: buffer %d block %d elem %d = %v, want %v", where("AllGatherCoalesced", "-"), i, q, j, cv.to(recvs[i][q*n+j]), val(dt, q, bases[i]+j))
			}
		}
	}
	for _, op := range goccl.RedOps() {
		if op == goccl.Avg && !dt.IsFloat() {
			continue
		}
		for i, n := range counts {
			sends[i], recvs[i] = make([]T, P*n), make([]T, n)
			fill(cv, dt, sends[i], r, bases[i])
		}
		m.ops++
		if err := blockingOrNot(ctx, nb, func() error { return goccl.ReduceScatterCoalesced(ctx, c, sends, recvs, op) },
			func() (goccl.Request, error) { return goccl.IReduceScatterCoalesced(ctx, c, sends, recvs, op) }); err != nil {
			return fmt.Errorf("%s: %w", where("ReduceScatterCoalesced", op), err)
		}
		for i, n := range counts {
			want := func(j int) float64 { return expected(dt, op, P, bases[i]+r*n+j) }
			if j := firstWrong(cv, recvs[i], want); j >= 0 {
				return fmt.Errorf("%s: buffer %d elem %d = %v, want %v", where("ReduceScatterCoalesced", op), i, j, cv.to(recvs[i][j]), want(j))
			}
		}
	}
	return nil
}
