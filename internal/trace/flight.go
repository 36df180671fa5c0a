package trace

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// FlightVersion is the version of PyTorch's flight-recorder dump format
// that Flight writes (torch/csrc/distributed/c10d/FlightRecorder.hpp's
// version_val): the keys and their meaning are PyTorch's, so that its
// fr_trace and `goccl doctor flight-recorder` read goccl's dumps as they
// read PyTorch's.
const FlightVersion = "2.10"

// Op is one operation as the flight recorder keeps it: what PyTorch's
// flight recorder keeps of a collective (its name, sequence numbers, the
// sizes and element type of its input and output, when it was scheduled,
// started and completed), in fields of fixed size so that recording
// allocates nothing.
type Op struct {
	// Name is PyTorch's name of the operation: "all_reduce", "broadcast",
	// "send", "coalesced" (a group of point-to-point operations), ...
	Name string
	// Kind is the caller's kind of operation: a scheduled operation is
	// taken over by the operation that starts with the same Kind and DType
	// (Start).
	Kind uint8
	Seq  uint64 // collective_seq_id (0 for point to point)
	P2P  bool
	// SendPeer and RecvPeer are the peers of a point-to-point operation's
	// send and receive halves (-1: no such half), SendSeq and RecvSeq
	// their sequence numbers between the pair of ranks.
	SendPeer, RecvPeer int
	SendSeq, RecvSeq   uint64
	In, Out            int64  // elements of the input and the output tensor (-1: none)
	DType              string // PyTorch's name of the element type: "Float", "BFloat16", ...

	id                          uint64
	created, started, completed int64 // ns since the Unix epoch; 0: not yet
	retired                     bool  // ended without completing (failed, or never started)
	err                         string
}

// state is PyTorch's name of the operation's state.
func (o *Op) state() string {
	switch {
	case o.completed != 0:
		return "completed"
	case o.started != 0:
		return "started"
	}
	return "scheduled"
}

// FlightGroup names the communicator a flight recorder records: PyTorch's
// process group (its name and description) and its ranks.
type FlightGroup struct {
	Rank    int    // this process's rank in the group
	Size    int    // the group's ranks are 0 to Size-1
	Name    string // "0" for the world
	Desc    string // "default_pg" for the world
	Timeout time.Duration
	Lib     string // comm_lib_version: "goccl v1.2.3"
}

// Flight is a flight recorder: a ring of the last operations of one
// communicator, each scheduled (issued, waiting behind others), started
// (entered) or completed, which it writes on demand in PyTorch's
// flight-recorder JSON schema. Its methods are safe for concurrent use and
// allocate nothing but WriteJSON and Text. A nil *Flight records nothing.
type Flight struct {
	g    FlightGroup
	mu   sync.Mutex
	ring []Op
	next uint64   // operations recorded so far: the next record_id
	sch  []uint64 // ids of the scheduled operations not started, oldest first
	// The collective sequence numbers of the last operation scheduled or
	// started (the predicted number of a scheduled one), of the last
	// started and of the last completed.
	lastEnq, lastStart, lastDone uint64
}

// NewFlight returns a flight recorder of g's operations that keeps the last
// keep of them (keep >= 1).
func NewFlight(g FlightGroup, keep int) *Flight {
	return &Flight{g: g, ring: make([]Op, max(keep, 1)), sch: make([]uint64, 0, 64)}
}

// add puts op in the ring as the next operation (f.mu held) and returns its id.
func (f *Flight) add(op *Op) uint64 {
	op.id = f.next
	f.ring[f.next%uint64(len(f.ring))] = *op
	f.next++
	return op.id
}

// at is the operation id if the ring still holds it (f.mu held).
func (f *Flight) at(id uint64) *Op {
	if id >= f.next || f.next-id > uint64(len(f.ring)) {
		return nil
	}
	return &f.ring[id%uint64(len(f.ring))]
}

// Schedule records op as scheduled: issued, to start once the operations
// before it are done. A collective is given the sequence number it will
// have, the one after the last scheduled or started.
func (f *Flight) Schedule(op Op) {
	if f == nil {
		return
	}
	op.created = time.Now().UnixNano()
	f.mu.Lock()
	defer f.mu.Unlock()
	if !op.P2P {
		f.lastEnq++
		op.Seq = f.lastEnq
	}
	id := f.add(&op)
	if len(f.sch) == cap(f.sch) { // more outstanding than expected: drop the oldest
		f.sch = append(f.sch[:0], f.sch[1:]...)
	}
	f.sch = append(f.sch, id)
}

// Start records that op starts and returns its id for End. It takes over
// the oldest scheduled operation when that one is op (same Kind and DType:
// queued operations start in issue order; the sizes may be known only
// later, see Amend), else records op anew.
func (f *Flight) Start(op Op) uint64 {
	if f == nil {
		return 0
	}
	now := time.Now().UnixNano()
	f.mu.Lock()
	defer f.mu.Unlock()
	if !op.P2P {
		f.lastStart = op.Seq
		f.lastEnq = max(f.lastEnq, op.Seq)
	}
	if len(f.sch) > 0 {
		if s := f.at(f.sch[0]); s != nil && s.Kind == op.Kind && s.DType == op.DType {
			f.sch = append(f.sch[:0], f.sch[1:]...)
			op.id, op.created, op.started = s.id, s.created, now
			*s = op
			return op.id
		}
	}
	op.created, op.started = now, now
	return f.add(&op)
}

// Amend replaces the description of the started operation id (its name,
// peers, sequence numbers and sizes) with op's, keeping its times: for
// what is known only once it has started.
func (f *Flight) Amend(id uint64, op Op) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.at(id); s != nil {
		op.id, op.created, op.started = s.id, s.created, s.started
		*s = op
	}
}

// End records the end of operation id: completed when err is "", else
// retired with the error, in state started (it entered the operation and
// did not complete it).
func (f *Flight) End(id uint64, err string) {
	if f == nil {
		return
	}
	now := time.Now().UnixNano()
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.at(id)
	if s == nil {
		return
	}
	if err != "" {
		s.retired, s.err = true, err
		return
	}
	s.completed, s.retired = now, true
	if !s.P2P {
		f.lastDone = s.Seq
	}
}

// RetireScheduled retires the scheduled operations that will never start
// (the communicator stopped them), with why.
func (f *Flight) RetireScheduled(why string) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range f.sch {
		if s := f.at(id); s != nil {
			s.retired, s.err = true, why
		}
	}
	f.sch = f.sch[:0]
}

// snapshot copies the operations the ring holds, oldest first, and the
// group's status.
func (f *Flight) snapshot(n int) (ops []Op, enq, start, done uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := min(uint64(max(n, 0)), f.next, uint64(len(f.ring)))
	ops = make([]Op, 0, k)
	for id := f.next - k; id < f.next; id++ {
		ops = append(ops, f.ring[id%uint64(len(f.ring))])
	}
	return ops, f.lastEnq, f.lastStart, f.lastDone
}

// Text formats the last n operations for a log, one line each, oldest first.
func (f *Flight) Text(n int) string {
	if f == nil {
		return ""
	}
	ops, _, _, _ := f.snapshot(n)
	var sb strings.Builder
	for i := range ops {
		o := &ops[i]
		fmt.Fprintf(&sb, "\n  %s", o.profilingName(f.g.Rank, 0))
		if !o.P2P {
			fmt.Fprintf(&sb, " #%d", o.Seq)
		}
		if o.In >= 0 || o.Out >= 0 {
			fmt.Fprintf(&sb, " %d/%d %s", max(o.In, 0), max(o.Out, 0), o.DType)
		}
		fmt.Fprintf(&sb, " %s", o.state())
		if o.started != 0 {
			fmt.Fprintf(&sb, " at %s", time.Unix(0, o.started).Format("15:04:05.000000"))
		}
		if o.completed != 0 {
			fmt.Fprintf(&sb, ", %v", time.Duration(o.completed-o.started).Round(time.Microsecond))
		}
		if o.err != "" {
			fmt.Fprintf(&sb, ": %s", o.err)
		}
	}
	return sb.String()
}

// profilingName is PyTorch's profiling_name of the half (0: the send
// half, or the whole operation; 1: the receive half) of op on rank:
// "nccl:all_reduce", "nccl:send 0->1", "nccl:recv 1<-0". The prefix is
// NCCL's because PyTorch's fr_trace reads only "nccl" and "xccl"
// operations.
func (o *Op) profilingName(rank, half int) string {
	switch {
	case o.Name == "send" || o.Name == "sendrecv" && half == 0:
		return "nccl:send " + strconv.Itoa(rank) + "->" + strconv.Itoa(o.SendPeer)
	case o.Name == "recv" || o.Name == "sendrecv":
		return "nccl:recv " + strconv.Itoa(rank) + "<-" + strconv.Itoa(o.RecvPeer)
	}
	return "nccl:" + o.Name
}
