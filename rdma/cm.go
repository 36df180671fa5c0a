package rdma

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	"github.com/goccl/goccl/rdma/qp"
)

// ConnInfo is what two sides exchange to connect their RC QPs (the job
// rdma_cm or perftest's TCP side channel does): QP number, first PSN, GID,
// UDP port and active MTU of the device, and optionally one memory region
// for the peer's RDMA WRITEs and READs.
type ConnInfo struct {
	QPN  uint32   `json:"qpn"`
	PSN  uint32   `json:"psn"`
	GID  [16]byte `json:"gid"`
	Port uint16   `json:"port"`
	MTU  int      `json:"mtu,omitempty"` // the device's ActiveMTU; both sides use the smaller
	RKey uint32   `json:"rkey,omitempty"`
	Addr uint64   `json:"addr,omitempty"`
	Len  int      `json:"len,omitempty"`
	// SrcPort is the UDP source port the queue pair sends from (v2;
	// QPSource), 0 when it is Port.
	SrcPort uint16 `json:"sport,omitempty"`
}

// LocalInfo describes q (a random first PSN) and, when mr is not nil, mr.
func (q *QP) LocalInfo(mr *MR) ConnInfo {
	ci := ConnInfo{QPN: q.QPN(), PSN: rand.Uint32() & 0xffffff, GID: q.d.GID(), Port: q.d.Addr().Port(), MTU: q.d.ActiveMTU()}
	if p := q.Source().Port(); p != ci.Port {
		ci.SrcPort = p
	}
	if mr != nil {
		ci.RKey, ci.Addr, ci.Len = mr.RKey(), mr.Addr(), len(mr.buf)
	}
	return ci
}

// ExchangeConnInfo sends local over conn (one JSON line) and reads the
// peer's, within ctx's deadline.
func ExchangeConnInfo(ctx context.Context, conn net.Conn, local ConnInfo) (ConnInfo, error) {
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
		defer conn.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	b, _ := json.Marshal(local)
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return ConnInfo{}, fmt.Errorf("rdma: sending connection info to %v: %w", conn.RemoteAddr(), err)
	}
	line, err := readLine(conn)
	if err != nil {
		return ConnInfo{}, fmt.Errorf("rdma: reading connection info from %v: %w", conn.RemoteAddr(), err)
	}
	var remote ConnInfo
	if err := json.Unmarshal(line, &remote); err != nil {
		return ConnInfo{}, fmt.Errorf("rdma: bad connection info from %v: %w", conn.RemoteAddr(), err)
	}
	return remote, nil
}

// ConnectOptions are the RC attributes Connect uses.
type ConnectOptions struct {
	PathMTU  int   // default the smaller of the two devices' active MTUs
	Timeout  uint8 // default 14 (67 ms)
	RetryCnt uint8 // default 7
	RNRRetry uint8 // default 7 (infinite)
	RdAtomic uint8 // max_rd_atomic and max_dest_rd_atomic, default 16
	Access   uint32
}

// Connect moves q through INIT, RTR and RTS towards the peer remote (its
// own side described by local).
func (q *QP) Connect(local, remote ConnInfo, o ConnectOptions) error {
	if o.PathMTU == 0 {
		o.PathMTU = q.d.ActiveMTU()
		if remote.MTU > 0 && remote.MTU < o.PathMTU {
			o.PathMTU = remote.MTU
		}
	}
	if o.Timeout == 0 {
		o.Timeout = 14
	}
	if o.RetryCnt == 0 {
		o.RetryCnt = 7
	}
	if o.RNRRetry == 0 {
		o.RNRRetry = qp.InfiniteRNRRetry
	}
	if o.RdAtomic == 0 {
		o.RdAtomic = qp.MaxRdAtomic
	}
	if o.Access == 0 {
		o.Access = AccessRemoteWrite | AccessRemoteRead
	}
	steps := []struct {
		a    qp.Attr
		mask qp.AttrMask
	}{
		{qp.Attr{State: qp.StateInit, Port: 1, AccessFlags: o.Access}, qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort | qp.AttrAccessFlags},
		{qp.Attr{State: qp.StateRTR, PathMTU: o.PathMTU, DestQPN: remote.QPN, RQPSN: remote.PSN, MaxDestRdAtomic: o.RdAtomic, MinRNRTimer: 12,
			AV: qp.AddressVector{DGID: remote.GID, DPort: remote.Port, SPort: remote.SrcPort}},
			qp.AttrState | qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN | qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer},
		{qp.Attr{State: qp.StateRTS, SQPSN: local.PSN, Timeout: o.Timeout, RetryCnt: o.RetryCnt, RNRRetry: o.RNRRetry, MaxQPRdAtomic: o.RdAtomic},
			qp.AttrState | qp.AttrSQPSN | qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		if err := q.Modify(&s.a, s.mask); err != nil {
			return err
		}
	}
	return nil
}

// readLine reads up to a newline one byte at a time, so that nothing after
// it is consumed: the caller may go on using conn.
func readLine(conn net.Conn) ([]byte, error) {
	var line []byte
	var b [1]byte
	for len(line) < 4096 {
		if _, err := conn.Read(b[:]); err != nil {
			return nil, err
		}
		if b[0] == '\n' {
			return line, nil
		}
		line = append(line, b[0])
	}
	return nil, errors.New("connection info line longer than 4096 bytes")
}
