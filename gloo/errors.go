package gloo

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/goccl/goccl/transport"
)

// ErrPeerLost is wrapped by every *PeerLostError (it is goccl's
// transport.ErrPeerLost, so errors.Is(err, goccl.ErrPeerLost) holds too).
var ErrPeerLost = transport.ErrPeerLost

// PeerLostError: the connection to a peer rank ended (the process died,
// closed its process group, or the link broke).
type PeerLostError struct {
	Rank, Peer int
	Cause      error
}

func (e *PeerLostError) Error() string {
	return fmt.Sprintf("gloo: rank %d: lost peer rank %d: %v", e.Rank, e.Peer, e.Cause)
}
func (e *PeerLostError) Unwrap() error        { return e.Cause }
func (e *PeerLostError) Is(target error) bool { return target == ErrPeerLost }

// ProtocolError: a peer sent something this rank cannot accept: a malformed
// message, or one that shows the ranks called different operations (a
// size that disagrees with the receive posted here, data nobody asked for).
type ProtocolError struct {
	Rank, Peer int
	Msg        string
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("gloo: rank %d: peer rank %d: %s", e.Rank, e.Peer, e.Msg)
}

// OpError is the error of a collective or point-to-point operation: it names
// the rank, the operation (as torch.distributed names it), its tag and,
// when one is to blame, the peer.
type OpError struct {
	Rank int
	Op   string // "all_reduce", "broadcast", "all_gather", "barrier", "send", "recv"
	Tag  uint32 // the collective's tag (torch's collective counter) or the user tag
	Peer int    // -1 when no single peer is to blame
	Err  error
}

func (e *OpError) Error() string {
	// The cause's own "gloo: rank N: " is said once.
	msg := strings.TrimPrefix(e.Err.Error(), fmt.Sprintf("gloo: rank %d: ", e.Rank))
	if e.Peer >= 0 {
		return fmt.Sprintf("gloo: rank %d: %s (tag %d) with peer rank %d: %s", e.Rank, e.Op, e.Tag, e.Peer, msg)
	}
	return fmt.Sprintf("gloo: rank %d: %s (tag %d): %s", e.Rank, e.Op, e.Tag, msg)
}
func (e *OpError) Unwrap() error { return e.Err }

// ErrInvalidArgument is wrapped by errors for bad arguments (ranks, roots,
// buffer lengths, reduction operators).
var ErrInvalidArgument = errors.New("invalid argument")

// ErrClosed is wrapped by the errors of calls on a closed or failed group.
var ErrClosed = errors.New("process group closed")

func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// slotName describes a slot for error messages: its collective and tag.
func slotName(slot uint64) string {
	tag := uint32(slot >> 24)
	switch uint8(slot >> 56) {
	case allreduceSlotPrefix:
		return fmt.Sprintf("all_reduce slot (tag %d)", tag)
	case allgatherSlotPrefix:
		return fmt.Sprintf("all_gather slot (tag %d)", tag)
	case broadcastSlotPrefix:
		return fmt.Sprintf("broadcast slot (tag %d)", tag)
	case barrierSlotPrefix:
		return fmt.Sprintf("barrier slot (tag %d)", tag)
	}
	if slot <= 0xffffffff {
		return fmt.Sprintf("send/recv slot (tag %d)", slot)
	}
	return fmt.Sprintf("slot %#x", slot)
}
