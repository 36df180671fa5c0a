package gloo

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
)

// The wire format of Gloo's TCP transport (gloo/transport/tcp, commit
// 5b14351 of 2022-05-18, the one Debian's python3-torch 1.13 links): every
// message on a pair's connection starts with a preamble of six
// native-endian (little-endian on x86-64 and arm64) size_t fields, then,
// for data messages only, `length` payload bytes.
const preambleLen = 48

// Opcodes of the preamble (gloo's Op::Opcode).
const (
	opSendBuffer        = 0 // data into a bound buffer (not used by torch; refused)
	opSendUnboundBuffer = 1 // data for the oldest announced receive of the slot
	opNotifySendReady   = 2 // the sender has a send posted on the slot
	opNotifyRecvReady   = 3 // the receiver has a receive of up to length bytes posted on the slot
)

// preamble is the message header (gloo's Op::preamble).
type preamble struct {
	nbytes  uint64 // preambleLen + payload bytes
	opcode  uint64
	slot    uint64
	offset  uint64 // unused for unbound buffers
	length  uint64 // payload bytes (data) or announced size (notifications)
	roffset uint64 // unused for unbound buffers
}

func (p *preamble) put(b []byte) {
	_ = b[preambleLen-1]
	binary.LittleEndian.PutUint64(b[0:], p.nbytes)
	binary.LittleEndian.PutUint64(b[8:], p.opcode)
	binary.LittleEndian.PutUint64(b[16:], p.slot)
	binary.LittleEndian.PutUint64(b[24:], p.offset)
	binary.LittleEndian.PutUint64(b[32:], p.length)
	binary.LittleEndian.PutUint64(b[40:], p.roffset)
}

// parsePreamble decodes and checks a preamble: a known opcode, nbytes equal
// to preambleLen plus the payload for data and to preambleLen for
// notifications, and a payload of at most maxLen bytes.
func parsePreamble(b []byte, maxLen uint64) (preamble, error) {
	if len(b) < preambleLen {
		return preamble{}, fmt.Errorf("preamble of %d bytes, want %d", len(b), preambleLen)
	}
	p := preamble{
		nbytes:  binary.LittleEndian.Uint64(b[0:]),
		opcode:  binary.LittleEndian.Uint64(b[8:]),
		slot:    binary.LittleEndian.Uint64(b[16:]),
		offset:  binary.LittleEndian.Uint64(b[24:]),
		length:  binary.LittleEndian.Uint64(b[32:]),
		roffset: binary.LittleEndian.Uint64(b[40:]),
	}
	switch p.opcode {
	case opSendUnboundBuffer:
		if p.length > maxLen {
			return p, fmt.Errorf("data message of %d bytes exceeds the limit of %d", p.length, maxLen)
		}
		if p.nbytes != preambleLen+p.length {
			return p, fmt.Errorf("data message: nbytes %d is not %d + length %d", p.nbytes, preambleLen, p.length)
		}
	case opNotifySendReady, opNotifyRecvReady:
		if p.nbytes != preambleLen {
			return p, fmt.Errorf("notification (opcode %d): nbytes %d, want %d", p.opcode, p.nbytes, preambleLen)
		}
	case opSendBuffer:
		return p, fmt.Errorf("opcode %d (SEND_BUFFER, a bound buffer) is not supported: torch's process group uses unbound buffers only", p.opcode)
	default:
		return p, fmt.Errorf("unknown opcode %d", p.opcode)
	}
	return p, nil
}

// Slot prefixes of Gloo's collectives (gloo/types.h).
const (
	allgatherSlotPrefix = 0x02
	allreduceSlotPrefix = 0x04
	broadcastSlotPrefix = 0x06
	barrierSlotPrefix   = 0x07
)

// slotOf is gloo's Slot::build(prefix, tag): the prefix in the top byte, the
// 32-bit tag in bits 24-55.
func slotOf(prefix uint8, tag uint32) uint64 {
	return uint64(prefix)<<56 | uint64(tag)<<24
}

// A pair address as Gloo's TCP transport publishes it (tcp::Address::bytes):
// a struct sockaddr_storage (128 bytes, Linux layout: family in host order,
// port in network order) followed by a native-endian int64 sequence number,
// -1 in this Gloo version (every pair listens on a socket of its own).
const (
	addrLen      = 136
	afInet       = 2  // AF_INET on Linux
	afInet6      = 10 // AF_INET6 on Linux
	seqUnset     = -1
	sockaddrSize = 128
)

// pairAddr is a decoded pair address.
type pairAddr struct {
	ip      net.IP // 4 bytes for IPv4, 16 for IPv6
	port    int
	rawPort uint16 // sin_port as a little-endian host reads it (gloo compares these)
	zone    uint32 // sin6_scope_id
	seq     int64
}

// encodeAddr returns the 136 address bytes of a listener at ip:port.
func encodeAddr(ip net.IP, port int) []byte {
	b := make([]byte, addrLen)
	if ip4 := ip.To4(); ip4 != nil {
		binary.LittleEndian.PutUint16(b[0:], afInet)
		binary.BigEndian.PutUint16(b[2:], uint16(port))
		copy(b[4:8], ip4)
	} else {
		binary.LittleEndian.PutUint16(b[0:], afInet6)
		binary.BigEndian.PutUint16(b[2:], uint16(port))
		copy(b[8:24], ip.To16())
	}
	binary.LittleEndian.PutUint64(b[sockaddrSize:], ^uint64(0)) // seqUnset
	return b
}

// decodeAddr parses one address.
func decodeAddr(b []byte) (pairAddr, error) {
	if len(b) != addrLen {
		return pairAddr{}, fmt.Errorf("address of %d bytes, want %d", len(b), addrLen)
	}
	a := pairAddr{
		port:    int(binary.BigEndian.Uint16(b[2:])),
		rawPort: binary.LittleEndian.Uint16(b[2:]),
		seq:     int64(binary.LittleEndian.Uint64(b[sockaddrSize:])),
	}
	switch fam := binary.LittleEndian.Uint16(b[0:]); fam {
	case afInet:
		a.ip = net.IP(bytes.Clone(b[4:8]))
	case afInet6:
		a.ip = net.IP(bytes.Clone(b[8:24]))
		a.zone = binary.LittleEndian.Uint32(b[24:])
	default:
		return a, fmt.Errorf("address family %d is neither AF_INET nor AF_INET6", fam)
	}
	if a.port == 0 {
		return a, fmt.Errorf("address %s has port 0", a.ip)
	}
	return a, nil
}

func (a pairAddr) String() string {
	return net.JoinHostPort(a.ip.String(), fmt.Sprint(a.port))
}

// extractAddr picks, out of the addresses rank `owner` published for its
// pairs (one per other rank, in rank order, its own left out), the one of
// its pair with rank `me` (gloo's rendezvous::Context::extractAddress).
func extractAddr(all []byte, owner, me, size int) (pairAddr, error) {
	if size < 2 || len(all) != (size-1)*addrLen {
		return pairAddr{}, fmt.Errorf("rank %d published %d address bytes, want %d (%d peers × %d)", owner, len(all), (size-1)*addrLen, size-1, addrLen)
	}
	i := me
	if me > owner {
		i = me - 1
	}
	return decodeAddr(all[i*addrLen : (i+1)*addrLen])
}

// connects reports whether the side listening at self connects to the
// peer listening at peer (true) or waits for the peer to connect (false),
// as gloo's tcp::Pair::connect decides: memcmp of the IP addresses, then the
// difference of the raw sin_port values; the larger side connects.
func connects(self, peer pairAddr) (bool, error) {
	if (self.ip.To4() == nil) != (peer.ip.To4() == nil) {
		return false, fmt.Errorf("address family mismatch: this rank listens on %s, the peer on %s", self, peer)
	}
	a, b := self.ip.To16(), peer.ip.To16()
	if self.ip.To4() != nil {
		a, b = self.ip.To4(), peer.ip.To4()
	}
	rv := bytes.Compare(a, b)
	if rv == 0 {
		rv = int(self.rawPort) - int(peer.rawPort)
	}
	if rv == 0 {
		return false, fmt.Errorf("the peer's address %s is this rank's own", peer)
	}
	return rv > 0, nil
}
