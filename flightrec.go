package goccl

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/trace"
)

// The flight recorder in PyTorch's schema (internal/trace's Flight): each
// operation is recorded scheduled when a non-blocking call issues it,
// started when it begins (begin) and completed, or retired with its error,
// when it ends (end). On the first failure the communicator writes the dump
// to GOCCL_FLIGHT_RECORDER_DUMP; DumpFlightRecorder writes it on demand.

// torchDTypes are PyTorch's names of the element types (c10::toString of
// the ScalarType), by DataType.
var torchDTypes = [numDataTypes]string{Int8: "Char", Uint8: "Byte", Int32: "Int", Uint32: "UInt32",
	Int64: "Long", Uint64: "UInt64", Float16Type: "Half", BFloat16Type: "BFloat16", Float32: "Float", Float64: "Double"}

// torchNames are PyTorch's names of the collectives (its profiling names
// without the backend), by kind; "" for kinds that are not recorded.
var torchNames = [numOpKinds]string{opAllReduce: "all_reduce", opBroadcast: "broadcast", opReduce: "reduce",
	opAllGather: "all_gather", opReduceScatter: "reduce_scatter", opAllToAll: "all_to_all_single",
	opSendRecv: "sendrecv", opBarrier: "barrier", opAllToAllv: "all_to_all", opGather: "gather", opScatter: "scatter"}

// flightFromEnv makes the flight recorder when keep > 0 (GOCCL_FLIGHT_RECORDER,
// or its default) and reads GOCCL_FLIGHT_RECORDER_DUMP. A Split
// communicator's process group is named after its job id's last part
// ("s1c0": the first Split, color 0), and its dump file gets that name
// before the extension (fr-0.s1c0.json), so that it does not overwrite the
// world's.
func (c *Comm) flightFromEnv(keep int, split bool, jobID string) {
	if keep == 0 {
		return
	}
	g := trace.FlightGroup{Rank: c.rank, Size: c.size, Name: "0", Desc: "default_pg", Timeout: c.timeout, Lib: libVersion()}
	if split {
		g.Name, g.Desc = jobID[strings.LastIndexByte(jobID, '-')+1:], "split"
	}
	c.fr = trace.NewFlight(g, keep)
	if path := config.FlightRecorderDump.Get(); path != "" {
		c.frDump = trace.ExpandPath(path, c.rank)
		if split {
			ext := filepath.Ext(c.frDump)
			c.frDump = strings.TrimSuffix(c.frDump, ext) + "." + g.Name + ext
		}
	}
}

// libVersion is the dumps' comm_lib_version: "goccl" and the module's
// version when the build knows it.
func libVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Path == "github.com/goccl/goccl" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			return "goccl " + bi.Main.Version
		}
		for _, d := range bi.Deps {
			if d.Path == "github.com/goccl/goccl" {
				return "goccl " + d.Version
			}
		}
	}
	return "goccl"
}

// flightOp describes an operation of kind k for the flight recorder: its
// input and output as PyTorch records them, one 1-D tensor each, of the
// elements this rank passes (AllGather's output and ReduceScatter's input
// hold size × count; Gather's output on the root, Scatter's input on the
// root), and none for a Barrier. Broadcast and Reduce have count in and out
// on every rank, as PyTorch records their one tensor.
func (c *Comm) flightOp(k opKind, dt DataType, root, count int) trace.Op {
	op := trace.Op{Name: torchNames[k], Kind: uint8(k), P2P: k == opSendRecv, SendPeer: -1, RecvPeer: -1,
		In: int64(count), Out: int64(count)}
	if dt.Valid() {
		op.DType = torchDTypes[dt]
	}
	n := int64(count) * int64(c.size)
	switch {
	case k == opAllGather || k == opGather && c.rank == root:
		op.Out = n
	case k == opReduceScatter || k == opScatter && c.rank == root:
		op.In = n
	case k == opAllToAll:
		op.In, op.Out = n, n
	case k == opBarrier:
		op.In, op.Out = -1, -1
	}
	return op
}

// flightCall is flightOp for a call, with a point-to-point call's peers and
// name and an AllToAllv's totals. The sequence numbers between the pair of
// ranks are those the call takes when it runs (nextSend, nextRecv), which
// a scheduled call does not know yet.
func (c *Comm) flightCall(a *call) trace.Op {
	op := c.flightOp(a.kind, a.dt, a.root, a.count)
	switch a.kind {
	case opSendRecv:
		op.SendPeer, op.RecvPeer = a.sendPeer, a.recvPeer
		switch {
		case a.sendPeer < 0:
			op.Name = "recv"
		case a.recvPeer < 0:
			op.Name = "send"
		}
	case opAllToAllv:
		op.In, op.Out = int64(sum(a.sendCounts)), int64(sum(a.recvCounts))
	case opGroup:
		op = trace.Op{Name: "coalesced", Kind: uint8(opSendRecv), P2P: true, SendPeer: -1, RecvPeer: -1, In: -1, Out: -1}
	}
	return op
}

func sum(v []int) (s int) {
	for _, x := range v {
		s += x
	}
	return s
}

// flightStart records the operation that begins (c.mu held): kind k, with
// begin's arguments; flightAmend adds what only the call knows.
func (c *Comm) flightStart(k opKind, dt DataType, root, count int) {
	op := c.flightOp(k, dt, root, count)
	op.Seq = c.op.Header.Seq
	if k == opSendRecv {
		op.Seq = 0
	}
	c.frID = c.fr.Start(op)
}

// flightAmend completes the started operation's record with what only the
// call a knows (c.mu held): a point-to-point call's name, peers and their
// sequence numbers, an AllToAllv's totals, a group's name ("coalesced").
func (c *Comm) flightAmend(a *call) {
	op := c.flightCall(a)
	if !op.P2P {
		op.Seq = c.op.Header.Seq
	}
	if a.kind == opSendRecv {
		if a.sendPeer >= 0 && a.sendPeer != c.rank {
			op.SendSeq = c.sendSeq[a.sendPeer] + 1
		}
		if a.recvPeer >= 0 && a.recvPeer != c.rank {
			op.RecvSeq = c.recvSeq[a.recvPeer] + 1
		}
	}
	c.fr.Amend(c.frID, op)
}

// flightEnd records the end of the running operation (c.mu held) and, on
// its failure, writes the dump to GOCCL_FLIGHT_RECORDER_DUMP once.
func (c *Comm) flightEnd(err error) {
	if err == nil {
		c.fr.End(c.frID, "")
		return
	}
	c.fr.End(c.frID, err.Error())
	if c.frDump == "" || c.frDumped {
		return
	}
	c.frDumped = true
	if derr := c.writeFlightDump(c.frDump); derr != nil {
		c.log.Warnf(subColl, "%s: %v", config.FlightRecorderDump.Name, derr)
		return
	}
	c.log.Warnf(subColl, "flight recorder dump (PyTorch's schema) written to %s; read it with `goccl doctor flight-recorder`", c.frDump)
}

// writeFlightDump writes the dump to path through a temporary file, so that
// a reader never sees half a dump.
func (c *Comm) writeFlightDump(path string) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	err = c.fr.WriteJSON(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// DumpFlightRecorder writes the operations the flight recorder holds
// (GOCCL_FLIGHT_RECORDER; GOCCL_TRACE_FILE or GOCCL_FLIGHT_RECORDER_DUMP
// turn it on with 64), oldest first, to w as JSON in PyTorch's
// flight-recorder schema: each operation with its process group,
// collective_seq_id (p2p_seq_id, numbered per pair of ranks, for point to
// point), profiling_name ("nccl:all_reduce"), input and output sizes and
// dtypes, and state: "scheduled" (issued by a non-blocking call, waiting
// behind others), "started" (entered and not completed: running, or
// failed) or "completed". `goccl doctor flight-recorder` and PyTorch's
// fr_trace read the dumps of every rank and name the rank that did not
// join an operation or disagrees on it. It may be called from any
// goroutine, also while an operation runs (a hang's dump on demand); with
// the recorder off it returns an error wrapping ErrInvalidArgument.
func (c *Comm) DumpFlightRecorder(w io.Writer) error {
	if c == nil {
		return nilComm("DumpFlightRecorder")
	}
	if c.fr == nil {
		return &Error{Rank: c.rank, Op: "DumpFlightRecorder", Err: fmt.Errorf("%w: the flight recorder is off (set %s=N or %s)",
			ErrInvalidArgument, config.FlightRecorder.Name, config.FlightRecorderDump.Name)}
	}
	return c.fr.WriteJSON(w)
}
