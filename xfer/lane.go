package xfer

import "github.com/goccl/goccl/rdma"

// A lane is one path a request's pieces travel: copies in this process
// (this agent's own memory, or a same-host peer's memory mapped here;
// lane_mem.go), one TCP stream to a peer (lane_tcp.go), or a peer's RDMA
// queue pair (lane_rdma.go). MakeXferReq gives each piece its lane;
// PostXferReq hands every lane its pieces and counts what they finish,
// knowing nothing of how they move.
type lane interface {
	// post takes cs over without waiting on the network; each piece is
	// finished exactly once, with nil once its bytes landed or with why
	// not. A lane that may copy in the caller says so (inline).
	post(cs []*chunk)
	// inline reports whether post may do the copies itself: such a lane is
	// posted after the others, so their transfers are under way meanwhile.
	inline() bool
	// fail ends the lane: what is queued or in flight, and what is posted
	// later, finishes with err (pieces already copying finish first).
	fail(err error)
	// count adds n bytes, finished on this lane, to the agent's Stats.
	count(n uint64)
	// path names the lane in traces: "shm", "local", "tcp" or "rdma".
	path() string
}

// chunk is one piece of a request, made once by MakeXferReq and reused
// by every post; or a message on a stream (a notification, a queue pair's
// description).
type chunk struct {
	req  *XferReq
	lane lane    // nil: a message, not a piece
	l, r side    // local and remote ends
	rtyp MemType // the remote end's memory type (TCP, RDMA)
	// frame is what the chunk travels as on a TCP stream: fWrite, fRead,
	// fNotif or fQP.
	frame uint8
	msg   []byte // fNotif: the notification; fQP: the queue pair's description
	// RDMA: the local memory region, the offset in it, the remote rkey
	mr    *rdma.MR
	mrOff int
	rkey  uint32
	// fQP: where the target's answer (or the error that ended the stream
	// first) goes; such a chunk belongs to no request.
	answer chan qpAnswer
}

// finish ends the chunk: its bytes count on its lane, and its request
// learns it is done.
func (c *chunk) finish(err error) {
	if c.answer != nil {
		c.answer <- qpAnswer{err: err}
		return
	}
	if err == nil && c.lane != nil {
		c.lane.count(c.r.d.Len)
	}
	c.req.chunkDone(err)
}
