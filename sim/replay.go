package sim

import (
	"cmp"
	"container/heap"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// OpKind is what an Op of a replay does, and so the stream it runs on.
type OpKind string

// The kinds of Op. Compute runs on the rank's compute stream, Host on its
// host (CPU) stream, Coll, Send, Recv and Comm on its communication
// stream; Nop takes no time and no stream (a marker the graph joins on).
// Comm is communication the model cannot time (a goccl trace's SendRecv,
// which does not record its peer): its recorded DurationUs, waiting for no
// other rank.
const (
	OpCompute OpKind = "compute"
	OpHost    OpKind = "host"
	OpColl    OpKind = "collective"
	OpSend    OpKind = "send"
	OpRecv    OpKind = "recv"
	OpComm    OpKind = "comm"
	OpNop     OpKind = "nop"
)

// Op is one operation of one rank's graph for Replay.
type Op struct {
	ID   uint64   `json:"id"`   // unique within the rank
	Name string   `json:"name"` // for the trace and errors
	Kind OpKind   `json:"kind"`
	Deps []uint64 `json:"deps,omitempty"` // ids of this rank's ops that must end first

	// Compute, Host and Comm: DurationUs (µs) when > 0, else the roofline
	// (GPU.Roofline) of FLOPs floating-point operations and MemBytes bytes
	// of HBM traffic on the topology's GPU.
	DurationUs float64 `json:"duration_us,omitempty"`
	FLOPs      float64 `json:"flops,omitempty"`
	MemBytes   float64 `json:"mem_bytes,omitempty"`

	// Coll: Coll is one of Kinds but sendrecv, Bytes what each rank puts
	// in (its send buffer: NCCL's sendcount × element size, Chakra's
	// comm_size; Replay asks Collective for all_gather's whole output,
	// members × Bytes, and the other kinds' Bytes as they are); Group names the
	// communicator: its members are the ranks that have collectives of that
	// Group, and the k-th collective of a Group on each member is one call.
	// Send and Recv: Bytes is the message, Peer the other rank, Tag tells
	// messages between one pair apart (matched in order per tag).
	Coll  string `json:"coll,omitempty"`
	Bytes int64  `json:"bytes,omitempty"`
	Group string `json:"group,omitempty"`
	Peer  int    `json:"peer,omitempty"`
	Tag   int64  `json:"tag,omitempty"`
}

// ReplayOptions tune the compute model; zero values are the defaults.
type ReplayOptions struct {
	ComputeEff, MemEff float64 // the roofline's achieved fractions of peak (0: 1, the datasheet peak)
}

// Span is one op as it ran in the replay (µs from the start of the replay).
type Span struct {
	Rank    int     `json:"rank"`
	ID      uint64  `json:"id"`
	Name    string  `json:"name"`
	Kind    OpKind  `json:"kind"`
	StartUs float64 `json:"start_us"`
	EndUs   float64 `json:"end_us"`
	Bytes   int64   `json:"bytes,omitempty"`
	Algo    string  `json:"algo,omitempty"` // the collective's algorithm (and protocol) on the topology
}

// RankTime is one rank's totals (µs).
type RankTime struct {
	Rank          int     `json:"rank"`
	EndUs         float64 `json:"end_us"`          // when its last op ends
	ComputeUs     float64 `json:"compute_us"`      // busy time of the compute stream
	HostUs        float64 `json:"host_us"`         // busy time of the host stream
	CommUs        float64 `json:"comm_us"`         // busy time of the communication stream
	ExposedCommUs float64 `json:"exposed_comm_us"` // communication while the compute stream is idle
}

// ReplayResult is what Replay predicts.
type ReplayResult struct {
	Topology     string     `json:"topology"`
	TotalUs      float64    `json:"total_us"` // the last rank's end
	Ranks        []RankTime `json:"ranks"`
	CriticalPath []Span     `json:"critical_path"` // the chain of ops that sets TotalUs, first to last
	Spans        []Span     `json:"-"`             // every op; WriteChromeTrace draws them
}

// The streams of a rank: in order, one op at a time each, as a CUDA stream
// runs its kernels (NCCL's collectives on their own stream beside the
// compute stream).
const (
	streamCompute = iota
	streamComm
	streamHost
	streamNone
	numStreams
)

var streamOf = map[OpKind]int{OpCompute: streamCompute, OpHost: streamHost, OpColl: streamComm,
	OpSend: streamComm, OpRecv: streamComm, OpComm: streamComm, OpNop: streamNone}

var streamNames = [numStreams]string{"compute", "communication", "host", "markers"}

// Replay predicts the time of ranks' operation graphs on topo: rank r's
// ops run on GPU r (ranks fill node 0, then node 1, ...). Each rank runs
// its ops in a topological order of their Deps (ties in list order) on
// three in-order streams; an op starts when its deps have ended and its
// stream is free; a collective starts when every member of its group has
// reached it and lasts what Collective predicts for its kind, size and
// member count on topo; a Send and its Recv start together (a rendezvous:
// each waits for the other, as NCCL's point to point does) and last a
// sendrecv's time between their two GPUs. Errors name the rank and the op:
// a dependency that is not in the rank's graph, a cycle, a collective whose
// kinds differ between ranks, and ops that can never start (a deadlock).
func Replay(topo *Topology, ranks [][]Op, opt ReplayOptions) (*ReplayResult, error) {
	if err := topo.Validate(); err != nil {
		return nil, err
	}
	if len(ranks) == 0 {
		return nil, fmt.Errorf("sim: replay: no ranks")
	}
	if len(ranks) > topo.GPUs() {
		return nil, fmt.Errorf("sim: replay: %d ranks, topology %q has %d GPUs (scale it with more nodes)", len(ranks), topo.Name, topo.GPUs())
	}
	opt.ComputeEff = cmp.Or(opt.ComputeEff, 1)
	opt.MemEff = cmp.Or(opt.MemEff, 1)
	rp := &replay{topo: topo, opt: opt, times: map[timeKey]Result{}}
	if err := rp.build(ranks); err != nil {
		return nil, err
	}
	if err := rp.run(); err != nil {
		return nil, err
	}
	return rp.result(), nil
}

// rop is an op being replayed.
type rop struct {
	Op
	rank, idx   int
	stream      int
	deps        []int   // indices in the rank's order
	key         string  // its collective or point-to-point call
	dur         float64 // compute: µs
	ready       float64 // when its deps and stream allow it (comm ops)
	start, end  float64
	done        bool
	pred        *rop // what set its start: the critical path runs back through it
	readyPred   *rop
	algo        string
	arrivedOnce bool
}

type replay struct {
	topo  *Topology
	opt   ReplayOptions
	ranks [][]*rop          // each rank's ops in the order they run
	heads [][numStreams]int // next op per stream: index into queues
	queue [][numStreams][]*rop
	free  [][numStreams]float64
	calls map[string]*call
	times map[timeKey]Result
}

// call is one collective or one send/recv pair: the ops of its ranks.
type call struct {
	kind    OpKind
	members []int
	arrived []*rop
}

type timeKey struct {
	kind        string
	bytes       int64
	ranks       int
	crossesNode bool
}

// build orders each rank's ops and groups the communication into calls.
func (rp *replay) build(ranks [][]Op) error {
	n := len(ranks)
	rp.ranks = make([][]*rop, n)
	rp.queue = make([][numStreams][]*rop, n)
	rp.heads = make([][numStreams]int, n)
	rp.free = make([][numStreams]float64, n)
	rp.calls = map[string]*call{}
	for r, ops := range ranks {
		order, err := rp.order(r, ops)
		if err != nil {
			return err
		}
		rp.ranks[r] = order
		for _, o := range order {
			rp.queue[r][o.stream] = append(rp.queue[r][o.stream], o)
		}
	}
	return rp.match()
}

// order checks rank r's ops and sorts them topologically, ties in list
// order (Kahn's algorithm with the list index as priority).
func (rp *replay) order(r int, ops []Op) ([]*rop, error) {
	byID := make(map[uint64]int, len(ops))
	all := make([]*rop, len(ops))
	for i := range ops {
		o := &rop{Op: ops[i], rank: r, idx: i}
		if _, dup := byID[o.ID]; dup {
			return nil, fmt.Errorf("sim: replay: rank %d: op id %d appears twice", r, o.ID)
		}
		byID[o.ID] = i
		s, ok := streamOf[o.Kind]
		if !ok {
			return nil, fmt.Errorf("sim: replay: rank %d op %d (%s): kind %q: not one of compute, host, collective, send, recv, comm, nop", r, o.ID, o.Name, o.Kind)
		}
		o.stream = s
		all[i] = o
	}
	users := make([][]int, len(ops))
	indeg := make([]int, len(ops))
	for i, o := range all {
		for _, d := range o.Deps {
			j, ok := byID[d]
			if !ok {
				return nil, fmt.Errorf("sim: replay: rank %d op %d (%s): dependency %d is not an op of rank %d", r, o.ID, o.Name, d, r)
			}
			o.deps = append(o.deps, j)
			users[j] = append(users[j], i)
			indeg[i]++
		}
	}
	h := &intHeap{}
	for i := range all {
		if indeg[i] == 0 {
			heap.Push(h, i)
		}
	}
	order := make([]*rop, 0, len(all))
	for h.Len() > 0 {
		i := heap.Pop(h).(int)
		order = append(order, all[i])
		for _, u := range users[i] {
			if indeg[u]--; indeg[u] == 0 {
				heap.Push(h, u)
			}
		}
	}
	if len(order) < len(all) {
		return nil, cycleError(r, all, indeg)
	}
	pos := make([]int, len(all)) // original index → position in order
	for k, o := range order {
		pos[o.idx] = k
	}
	for k, o := range order {
		for d, j := range o.deps {
			o.deps[d] = pos[j]
		}
		o.idx = k
	}
	return order, nil
}

// cycleError names the ops of one dependency cycle among those Kahn's
// algorithm could not order: from one of them, follow unordered deps until
// an op repeats.
func cycleError(r int, all []*rop, indeg []int) error {
	start := slices.IndexFunc(indeg, func(d int) bool { return d > 0 })
	seen := map[int]int{}
	var path []uint64
	for i := start; ; {
		if at, ok := seen[i]; ok {
			ids := make([]string, 0, len(path)-at+1)
			for _, id := range path[at:] {
				ids = append(ids, fmt.Sprint(id))
			}
			ids = append(ids, fmt.Sprint(path[at]))
			return fmt.Errorf("sim: replay: rank %d: dependency cycle through ops %s", r, strings.Join(ids, " → "))
		}
		seen[i] = len(path)
		path = append(path, all[i].ID)
		for _, d := range all[i].deps {
			if indeg[d] > 0 {
				i = d
				break
			}
		}
	}
}

type intHeap []int

func (h intHeap) Len() int           { return len(h) }
func (h intHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h intHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *intHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *intHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// match checks each rank's ops, times the compute and groups the
// communication into calls: the k-th collective of a group on each of its
// members, the k-th message from one rank to another with one tag.
func (rp *replay) match() error {
	n := len(rp.ranks)
	groups := map[string][]int{}
	for r, ops := range rp.ranks {
		count := map[string]int{}
		for _, o := range ops {
			bad := func(format string, a ...any) error {
				return fmt.Errorf("sim: replay: rank %d op %d (%s): %s", r, o.ID, o.Name, fmt.Sprintf(format, a...))
			}
			switch o.Kind {
			case OpCompute, OpHost, OpComm:
				if err := rp.computeTime(o); err != nil {
					return bad("%v", err)
				}
			case OpColl:
				switch {
				case !oneOf(o.Coll, Kinds) || o.Coll == "sendrecv":
					return bad("collective %q: not one of %s (sendrecv: use send and recv ops)", o.Coll, strings.Join(Kinds[:len(Kinds)-1], ", "))
				case o.Bytes < 0:
					return bad("bytes %d: negative", o.Bytes)
				}
				if count[o.Group] == 0 && !slices.Contains(groups[o.Group], r) {
					groups[o.Group] = append(groups[o.Group], r)
				}
				o.key = fmt.Sprintf("collective %d of group %q", count[o.Group], o.Group)
				count[o.Group]++
			case OpSend, OpRecv:
				if o.Peer < 0 || o.Peer >= n || o.Peer == r {
					return bad("%s peer %d: want another rank, 0 to %d", o.Kind, o.Peer, n-1)
				}
				if o.Bytes < 0 {
					return bad("bytes %d: negative", o.Bytes)
				}
				src, dst := r, o.Peer
				if o.Kind == OpRecv {
					src, dst = dst, src
				}
				pair := fmt.Sprintf("message %d→%d tag %d", src, dst, o.Tag)
				o.key = fmt.Sprintf("%s #%d", pair, count[pair])
				count[pair]++
			}
		}
	}
	for _, ops := range rp.ranks {
		for _, o := range ops {
			if o.key == "" || rp.calls[o.key] != nil {
				continue
			}
			c := &call{kind: o.Kind, members: groups[o.Group]}
			if o.Kind != OpColl {
				c.members = []int{o.rank, o.Peer}
			}
			rp.calls[o.key] = c
		}
	}
	return nil
}

// computeTime sets a compute or host op's duration.
func (rp *replay) computeTime(o *rop) error {
	switch {
	case o.DurationUs < 0 || math.IsNaN(o.DurationUs) || math.IsInf(o.DurationUs, 0):
		return fmt.Errorf("duration %g µs: want 0 or more", o.DurationUs)
	case o.DurationUs > 0:
		o.dur = o.DurationUs
		return nil
	case o.FLOPs < 0 || o.MemBytes < 0:
		return fmt.Errorf("flops %g, bytes %g: negative", o.FLOPs, o.MemBytes)
	}
	o.dur = rp.topo.GPU.Roofline(o.FLOPs, o.MemBytes, rp.opt.ComputeEff, rp.opt.MemEff) * 1e6
	if math.IsInf(o.dur, 0) || math.IsNaN(o.dur) {
		return fmt.Errorf("%g FLOPs and %g bytes need the topology's gpu.tflops and gpu.hbm_GBps (topology %q has %g and %g)",
			o.FLOPs, o.MemBytes, rp.topo.Name, rp.topo.GPU.TFLOPS, rp.topo.GPU.HBMGBps)
	}
	return nil
}

// run replays every rank until nothing more can start.
func (rp *replay) run() error {
	work := make([]int, 0, len(rp.ranks))
	queued := make([]bool, len(rp.ranks))
	push := func(r int) {
		if !queued[r] {
			queued[r] = true
			work = append(work, r)
		}
	}
	for r := range rp.ranks {
		push(r)
	}
	for len(work) > 0 {
		r := work[len(work)-1]
		work, queued[r] = work[:len(work)-1], false
		if err := rp.advance(r, push); err != nil {
			return err
		}
	}
	return rp.deadlock()
}

// advance starts what rank r can start; a call whose last rank arrives
// runs, and its other ranks are pushed to advance in turn.
func (rp *replay) advance(r int, push func(int)) error {
	for progress := true; progress; {
		progress = false
		for s := range numStreams {
			q, h := rp.queue[r][s], rp.heads[r][s]
			if h >= len(q) || q[h].arrivedOnce {
				continue
			}
			o := q[h]
			ready, pred, ok := rp.readyAt(o, h)
			if !ok {
				continue
			}
			progress = true
			if o.key == "" { // runs alone
				o.start, o.end, o.pred, o.done = ready, ready+o.dur, pred, true
				rp.free[r][s] = o.end
				rp.heads[r][s]++
				continue
			}
			o.arrivedOnce, o.ready, o.readyPred = true, ready, pred
			c := rp.calls[o.key]
			c.arrived = append(c.arrived, o)
			if len(c.arrived) == len(c.members) {
				if err := rp.fire(c, push); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// readyAt is when o (the head of its stream, at h) may start: after its
// stream's previous op and its deps; pred is the one that ends last.
func (rp *replay) readyAt(o *rop, h int) (ready float64, pred *rop, ok bool) {
	if h > 0 && o.stream != streamNone {
		pred = rp.queue[o.rank][o.stream][h-1]
		ready = pred.end
	}
	for _, d := range o.deps {
		dep := rp.ranks[o.rank][d]
		if !dep.done {
			return 0, nil, false
		}
		if pred == nil || dep.end >= ready {
			ready, pred = dep.end, dep
		}
	}
	return ready, pred, true
}

// fire runs call c, all of whose ranks have arrived: it starts when the
// last arrives.
func (rp *replay) fire(c *call, push func(int)) error {
	first, last := c.arrived[0], c.arrived[0]
	bytes := int64(0)
	for _, o := range c.arrived {
		if c.kind == OpColl && o.Coll != first.Coll {
			return fmt.Errorf("sim: replay: %s: rank %d op %d (%s) is %s, rank %d op %d (%s) is %s",
				o.key, first.rank, first.ID, first.Name, first.Coll, o.rank, o.ID, o.Name, o.Coll)
		}
		if o.ready > last.ready {
			last = o
		}
		bytes = max(bytes, o.Bytes)
	}
	res, err := rp.commTime(c, first, bytes)
	if err != nil {
		return err
	}
	algo := res.Algo
	if res.Proto != "" {
		algo += "/" + res.Proto
	}
	for _, o := range c.arrived {
		o.start, o.end, o.done, o.algo = last.ready, last.ready+res.TimeUs, true, algo
		o.pred = last.readyPred
		rp.free[o.rank][streamComm] = o.end
		rp.heads[o.rank][streamComm]++
		push(o.rank)
	}
	return nil
}

// commTime is Collective's prediction for c (memoized): a collective on
// its group's member count; a message as a sendrecv between two GPUs of
// one node, or, when its ranks sit on different nodes, across nodes (the
// sendrecv of one node's GPUs and one more, whose ring crosses the node
// boundary).
func (rp *replay) commTime(c *call, o *rop, bytes int64) (Result, error) {
	k := timeKey{kind: o.Coll, bytes: bytes, ranks: len(c.members)}
	if k.kind == "all_gather" {
		k.bytes *= int64(k.ranks)
	}
	if c.kind != OpColl {
		g := rp.topo.GPUsPerNode
		k.kind, k.crossesNode = "sendrecv", c.members[0]/g != c.members[1]/g
		if k.crossesNode {
			k.ranks = min(g+1, rp.topo.GPUs())
		}
	}
	if r, ok := rp.times[k]; ok {
		return r, nil
	}
	r, err := rp.topo.Collective(Collective{Kind: k.kind, Bytes: k.bytes, Ranks: k.ranks})
	if err != nil {
		return Result{}, fmt.Errorf("sim: replay: rank %d op %d (%s), %s: %w", o.rank, o.ID, o.Name, o.key, err)
	}
	rp.times[k] = r
	return r, nil
}

// deadlock reports the ops that never ran: the calls some rank waits in
// for ranks that never arrive.
func (rp *replay) deadlock() error {
	var waits []string
	left := 0
	for r := range rp.ranks {
		for s := range numStreams {
			h, q := rp.heads[r][s], rp.queue[r][s]
			left += len(q) - h
			if h < len(q) && q[h].arrivedOnce {
				o := q[h]
				var missing []string
				for _, m := range rp.calls[o.key].members {
					if !slices.ContainsFunc(rp.calls[o.key].arrived, func(a *rop) bool { return a.rank == m }) {
						missing = append(missing, fmt.Sprint(m))
					}
				}
				waits = append(waits, fmt.Sprintf("rank %d op %d (%s) waits in %s for rank(s) %s", r, o.ID, o.Name, o.key, strings.Join(missing, ", ")))
			}
		}
	}
	if left == 0 {
		return nil
	}
	if len(waits) > 4 {
		waits = append(waits[:4], fmt.Sprintf("and %d more", len(waits)-4))
	}
	return fmt.Errorf("sim: replay: deadlock, %d op(s) never start: %s", left, strings.Join(waits, "; "))
}

// result gathers the spans, each rank's totals and the critical path.
func (rp *replay) result() *ReplayResult {
	res := &ReplayResult{Topology: rp.topo.Name}
	var last *rop
	for r, ops := range rp.ranks {
		rt := RankTime{Rank: r}
		for _, o := range ops {
			d := o.end - o.start
			switch o.stream {
			case streamCompute:
				rt.ComputeUs += d
			case streamComm:
				rt.CommUs += d
			case streamHost:
				rt.HostUs += d
			}
			rt.EndUs = max(rt.EndUs, o.end)
			if last == nil || o.end > last.end {
				last = o
			}
			res.Spans = append(res.Spans, o.span())
		}
		rt.ExposedCommUs = exposed(rp.queue[r][streamComm], rp.queue[r][streamCompute])
		res.TotalUs = max(res.TotalUs, rt.EndUs)
		res.Ranks = append(res.Ranks, rt)
	}
	for o := last; o != nil; o = o.pred {
		if o.stream != streamNone {
			res.CriticalPath = append(res.CriticalPath, o.span())
		}
	}
	slices.Reverse(res.CriticalPath)
	return res
}

func (o *rop) span() Span {
	return Span{Rank: o.rank, ID: o.ID, Name: o.Name, Kind: o.Kind, StartUs: o.start, EndUs: o.end, Bytes: o.Bytes, Algo: o.algo}
}

// exposed is the time of comm's intervals that none of comp's covers; each
// list is one in-order stream's, so sorted and disjoint.
func exposed(comm, comp []*rop) float64 {
	t, j := 0.0, 0
	for _, c := range comm {
		at := c.start
		for ; j < len(comp) && comp[j].end <= at; j++ {
		}
		for k := j; k < len(comp) && comp[k].start < c.end; k++ {
			if comp[k].start > at {
				t += comp[k].start - at
			}
			at = max(at, comp[k].end)
		}
		if c.end > at {
			t += c.end - at
		}
	}
	return t
}

// WriteChromeTrace writes the replay as Chrome trace-event JSON (the
// "JSON Object Format" of Google's Trace Event Format: complete events,
// "ph":"X", ts and dur in µs) that Perfetto (ui.perfetto.dev) and
// chrome://tracing open: one process per rank, one thread per stream; the
// critical path's ops carry "critical": true in their args.
func (r *ReplayResult) WriteChromeTrace(w io.Writer) error {
	type event struct {
		Name string         `json:"name"`
		Ph   string         `json:"ph"`
		Pid  int            `json:"pid"`
		Tid  int            `json:"tid"`
		Ts   float64        `json:"ts"`
		Dur  float64        `json:"dur"`
		Args map[string]any `json:"args,omitempty"`
	}
	crit := map[[2]uint64]bool{}
	for _, s := range r.CriticalPath {
		crit[[2]uint64{uint64(s.Rank), s.ID}] = true
	}
	var evs []event
	for _, rt := range r.Ranks {
		evs = append(evs, event{Name: "process_name", Ph: "M", Pid: rt.Rank, Args: map[string]any{"name": fmt.Sprintf("rank %d", rt.Rank)}})
		for s := range streamNone {
			evs = append(evs, event{Name: "thread_name", Ph: "M", Pid: rt.Rank, Tid: s, Args: map[string]any{"name": streamNames[s]}})
		}
	}
	for _, s := range r.Spans {
		if s.Kind == OpNop {
			continue
		}
		args := map[string]any{"id": s.ID, "kind": s.Kind}
		if s.Bytes != 0 {
			args["bytes"] = s.Bytes
		}
		if s.Algo != "" {
			args["algo"] = s.Algo
		}
		if crit[[2]uint64{uint64(s.Rank), s.ID}] {
			args["critical"] = true
		}
		evs = append(evs, event{Name: s.Name, Ph: "X", Pid: s.Rank, Tid: streamOf[s.Kind], Ts: s.StartUs, Dur: s.EndUs - s.StartUs, Args: args})
	}
	enc := json.NewEncoder(w)
	return enc.Encode(map[string]any{"traceEvents": evs, "displayTimeUnit": "ns"})
}

// gocclColls maps the operation names goccl's trace records (ops.go's
// opNames) to Collective's kinds, with the factor from the recorded bytes
// (count × element size as the caller gave them: the per-rank output of
// ReduceScatter, the per-peer block of AllToAll) to what each rank puts in.
var gocclColls = map[string]struct {
	kind    string
	perRank bool // bytes × ranks
}{
	"AllReduce": {"all_reduce", false}, "Broadcast": {"broadcast", false}, "Reduce": {"reduce", false},
	"AllGather": {"all_gather", false}, "ReduceScatter": {"reduce_scatter", true}, "AllToAll": {"alltoall", true},
	"Barrier": {"all_reduce", false}, // bytes 0: latency only
}

// gocclEvent is one line of a goccl trace file (internal/trace's Recorder).
type gocclEvent struct {
	Name string  `json:"name"`
	Ph   string  `json:"ph"`
	Pid  int     `json:"pid"`
	Tid  int     `json:"tid"`
	Ts   float64 `json:"ts"`  // µs since the Unix epoch
	Dur  float64 `json:"dur"` // µs
	Args struct {
		Bytes int64 `json:"bytes"`
	} `json:"args"`
}

// GocclTraceOps turns the trace files of one run (GOCCL_TRACE_FILE, one per
// rank; each event's "pid" is its rank, ranks 0 to n-1) into Replay's ops:
// each rank's operations (track 0) in the order they started, the
// collectives as OpColl (one communicator: every file's) and the time
// between one operation's end and the next one's start as OpCompute of
// that duration, as measured; SendRecv, Group and the kinds Collective
// lacks (AllToAllv, Gather, Scatter) as OpComm of their recorded time. An
// operation that the next one started before it ended ran in the
// background: the program went on without waiting for it. Times are
// wall-clock, taken from the earliest event of all files, so files
// written on different hosts line up only as far as their clocks do.
func GocclTraceOps(events [][]json.RawMessage) ([][]Op, error) {
	n := len(events)
	byRank := make([][]gocclEvent, n)
	seen := make([]bool, n)
	t0 := math.Inf(1)
	for f, evs := range events {
		rank := -1
		for i, raw := range evs {
			var e gocclEvent
			if err := json.Unmarshal(raw, &e); err != nil {
				return nil, fmt.Errorf("sim: goccl trace file %d event %d: %w", f, i, err)
			}
			if e.Ph != "X" || e.Tid != 0 {
				continue
			}
			if rank >= 0 && e.Pid != rank || e.Pid < 0 || e.Pid >= n || rank < 0 && seen[e.Pid] {
				return nil, fmt.Errorf("sim: goccl trace file %d event %d: pid %d: want one rank per file, 0 to %d", f, i, e.Pid, n-1)
			}
			rank, seen[e.Pid] = e.Pid, true
			byRank[rank] = append(byRank[rank], e)
			t0 = min(t0, e.Ts)
		}
		if rank < 0 {
			return nil, fmt.Errorf("sim: goccl trace file %d: no operations (track 0 events)", f)
		}
	}
	ranks := make([][]Op, n)
	for r, evs := range byRank {
		slices.SortStableFunc(evs, func(a, b gocclEvent) int { return cmp.Compare(a.Ts, b.Ts) })
		ranks[r] = gocclRankOps(evs, t0, n)
	}
	return ranks, nil
}

// gocclRankOps chains one rank's events: a compute op for each gap, each
// operation after what the program did before it.
func gocclRankOps(evs []gocclEvent, t0 float64, n int) []Op {
	var ops []Op
	var prev []uint64 // what the program's next step waits for
	at := t0          // where the program is
	add := func(o Op) uint64 {
		o.ID, o.Deps = uint64(len(ops)+1), prev
		ops = append(ops, o)
		return o.ID
	}
	for i, e := range evs {
		if gap := e.Ts - at; gap > 0 {
			prev = []uint64{add(Op{Name: "compute", Kind: OpCompute, DurationUs: gap})}
		}
		o := Op{Name: e.Name, Kind: OpComm, DurationUs: e.Dur, Bytes: e.Args.Bytes}
		if c, ok := gocclColls[e.Name]; ok {
			o.Kind, o.Coll, o.DurationUs = OpColl, c.kind, 0
			if c.perRank {
				o.Bytes *= int64(n)
			}
		}
		id := add(o)
		if i+1 == len(evs) || evs[i+1].Ts >= e.Ts+e.Dur {
			prev, at = []uint64{id}, e.Ts+e.Dur
		} else {
			at = e.Ts // the next started before this ended: it ran in the background
		}
	}
	return ops
}

// SameCompute gives every rank the same compute times, for a data-parallel
// (SPMD) run whose ranks all run one program: the compute before each
// rank's k-th other op (and after its last) becomes the median over ranks
// of that compute, a rank without compute there counting 0. A trace taken
// with more ranks than cores (several ranks of a job on one small machine,
// to be predicted on many) carries each rank's scheduling noise in its
// gaps, and since every collective waits for its last rank, a replay would
// add the largest of that noise at every collective. It refuses ranks whose
// other ops differ in number or, at some position, in kind or name, naming
// the first difference.
func SameCompute(ranks [][]Op) error {
	if len(ranks) < 2 {
		return nil
	}
	at := make([][]float64, len(ranks)) // at[r][k]: rank r's compute before its k-th other op
	var first []Op
	for r, ops := range ranks {
		var others []Op
		at[r] = []float64{0}
		for _, o := range ops {
			if o.Kind == OpCompute {
				at[r][len(others)] += o.DurationUs
				continue
			}
			others = append(others, o)
			at[r] = append(at[r], 0)
		}
		if r == 0 {
			first = others
			continue
		}
		if len(others) != len(first) {
			return fmt.Errorf("sim: same compute: rank %d has %d ops besides compute, rank 0 %d", r, len(others), len(first))
		}
		for i, o := range others {
			if o.Kind != first[i].Kind || o.Name != first[i].Name {
				return fmt.Errorf("sim: same compute: op %d is %s %q on rank %d, %s %q on rank 0", i, o.Kind, o.Name, r, first[i].Kind, first[i].Name)
			}
		}
	}
	d := make([]float64, len(ranks))
	for r, ops := range ranks {
		k := 0
		for i := range ops {
			if ops[i].Kind != OpCompute {
				k++
				continue
			}
			if ops[i].DurationUs <= 0 {
				continue // a roofline's FLOPs and bytes: the same on every rank
			}
			for q := range ranks {
				d[q] = at[q][k]
			}
			// Each op keeps its share of the rank's compute there.
			ops[i].DurationUs = max(ops[i].DurationUs*median(d)/at[r][k], 1e-3)
		}
	}
	return nil
}
