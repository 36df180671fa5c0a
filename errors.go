package goccl

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/goccl/goccl/internal/closed"
	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/transport"
)

// Errors that callers can test with errors.Is.
var (
	// ErrInvalidArgument: a bad count, buffer length, root, peer, type or op.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrClosed: something the operation needs was closed: this
	// communicator (Close), a peer's end of a link (the peer called Abort,
	// or closed its communicator), or the rendezvous store. It is one
	// sentinel with transport.ErrClosed and rendezvous.ErrClosed: errors.Is
	// matches any of the three against any other. A peer that was lost
	// (ErrPeerLost) and this communicator's own Abort (ErrAborted) are
	// reported as such instead.
	ErrClosed = closed.New("communicator closed")
	// ErrMismatch: ranks called different operations (count, type, op, root or
	// order differ). errors.As with *MismatchError gives the details. A
	// disagreement that no rank's schedule sees on the call itself (Broadcast
	// or Reduce roots that differ so that no rank receives a message from
	// a rank with the other root) is reported by the next operation that
	// reads the message left over, naming the earlier operation
	// (MismatchError.Of).
	ErrMismatch = errors.New("ranks disagree on the operation")
	// ErrPeerLost: a rank's process died or its connection broke. errors.As
	// with *PeerLostError names the rank; every surviving rank's error names
	// the same rank (the loss is relayed to ranks that were not talking to
	// it).
	ErrPeerLost = transport.ErrPeerLost
	// ErrAborted: Abort was called on the communicator.
	ErrAborted = errors.New("communicator aborted")
	// ErrCorrupt: a message failed its checksum (GOCCL_CHECKSUM=1 or
	// WithChecksum); the error names the peer that sent it.
	ErrCorrupt = transport.ErrCorrupt
)

// PeerLostError names the lost rank (Rank) and, when this rank learnt of the
// loss from another rank, that rank (Via; else -1).
type PeerLostError = transport.LostError

// MismatchError says which field of an operation a peer disagreed on.
type MismatchError = transport.MismatchError

// Error is the error every goccl operation returns: it names the rank, the
// operation and its sequence number on the communicator.
type Error struct {
	Rank int    // -1 when not known (Init refusing its environment, a zero Request)
	Op   string // "AllReduce", "Init", ...
	Seq  uint64 // operation sequence number (0 when not applicable)
	Err  error
}

func (e *Error) Error() string {
	rank := ""
	if e.Rank >= 0 {
		rank = "rank " + strconv.Itoa(e.Rank) + ": "
	}
	if e.Seq > 0 {
		return fmt.Sprintf("goccl: %s%s (op #%d): %v", rank, e.Op, e.Seq, e.Err)
	}
	return fmt.Sprintf("goccl: %s%s: %v", rank, e.Op, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrMismatch) true for header mismatches.
func (e *Error) Is(target error) bool {
	if target == ErrMismatch {
		var m *transport.MismatchError
		return errors.As(e.Err, &m)
	}
	return false
}

// nilComm is the error of a method called on a nil *Comm (one that Init
// or Split did not return, for example after their error was ignored); op
// names the method or its operation.
func nilComm(op string) error {
	return &Error{Rank: -1, Op: op, Err: fmt.Errorf("%w: nil *Comm (Init or Split failed, or none was made)", ErrInvalidArgument)}
}

// errorf is an *Error of this rank and operation kind (seq 0: none).
func (c *Comm) errorf(kind opKind, seq uint64, format string, args ...any) error {
	return &Error{Rank: c.rank, Op: kind.String(), Seq: seq, Err: fmt.Errorf(format, args...)}
}

// wrap makes err an *Error of this rank and operation, unless it is one.
func (c *Comm) wrap(kind opKind, seq uint64, err error) error {
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return &Error{Rank: c.rank, Op: kind.String(), Seq: seq, Err: err}
}

// explainTimeout completes err, the *Error of an operation that ran under
// the communicator's own timeout (its context had no deadline), when that
// timeout ended it: how long it was, where it was set (c.timeoutFrom) and
// how to raise it.
func (c *Comm) explainTimeout(err error) error {
	e, ok := err.(*Error)
	if !ok || !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &Error{Rank: e.Rank, Op: e.Op, Seq: e.Seq, Err: fmt.Errorf("did not finish within %v (%s; WithTimeout or %s raises it): %w",
		c.timeout, c.timeoutFrom, config.Timeout.Name, e.Err)}
}

// timeoutSource says where timeout d, set at Init from cfg and the
// environment, came from, for explainTimeout: WithTimeout, GOCCL_TIMEOUT
// or the default. A Split's WithTimeout is its parent's timeout, from
// wherever that came, so the environment is asked then.
func timeoutSource(cfg *options, d time.Duration) string {
	explicit := cfg.timeout > 0 && !cfg.split
	if v, set := config.Timeout.Lookup(); set && !explicit {
		if e, _, err := config.Timeout.Duration(); err == nil && e == d {
			return config.Timeout.Name + "=" + v
		}
	} else if !set && !explicit && d == DefaultTimeout {
		return fmt.Sprintf("%s unset: the default, %v", config.Timeout.Name, DefaultTimeout)
	}
	return fmt.Sprintf("WithTimeout(%v)", d)
}

// pastOps is how many collectives back explainMismatch can name the
// operation a peer's stray message belongs to.
const pastOps = 16

// explainMismatch completes the *MismatchError that err wraps, if any, for
// the reader: it names operations, element types and reduction operators
// instead of their codes and, when the peer's message belongs to an earlier
// collective that this rank ran without receiving it, it reports the field
// of that operation on which the two ranks disagree (the peer's schedule
// sent this rank a message that its own did not expect: for Broadcast and
// Reduce, a different root) instead of blaming the operation running now.
func (c *Comm) explainMismatch(err error) {
	var m *transport.MismatchError
	if !errors.As(err, &m) || m.WantName != "" || m.Of != "" {
		return
	}
	want, sent := m.Expected, m.Sent
	collectives := opKind(want.Op) != opSendRecv && opKind(sent.Op) != opSendRecv && want.Seq > 0 && sent.Seq > 0
	if collectives && sent.Seq < want.Seq {
		if h := c.past[sent.Seq%pastOps]; h.Seq == sent.Seq {
			h.Bytes = sent.Bytes
			var d *transport.MismatchError
			if errors.As(transport.Check(m.Peer, &h, &sent), &d) {
				m.Field, m.Want, m.Got = d.Field, d.Want, d.Got
				m.Of = fmt.Sprintf("%v (op #%d)", opKind(h.Op), h.Seq)
			}
		}
	}
	switch m.Field {
	case "op":
		m.WantName, m.GotName = opKind(m.Want).String(), opKind(m.Got).String()
		if m.Of == "" && collectives && want.Seq != sent.Seq {
			m.WantName += fmt.Sprintf(" (op #%d)", want.Seq)
			m.GotName += fmt.Sprintf(" (op #%d)", sent.Seq)
		}
	case "dtype":
		m.WantName, m.GotName = DataType(m.Want).String(), DataType(m.Got).String()
	case "redop":
		m.WantName, m.GotName = RedOp(m.Want).String(), RedOp(m.Got).String()
	}
}
