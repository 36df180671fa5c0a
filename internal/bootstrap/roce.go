package bootstrap

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/rdma"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/roce"
	"github.com/goccl/goccl/transport/tcp"
)

// RoCE configures GOCCL_NET=roce: the links that would be TCP go over RC
// queue pairs of a soft RoCE device (package transport/roce), each made
// over the TCP link to the same peer, which stays as its control channel.
type RoCE struct {
	// HCA selects the interface the device opens on, in NCCL_IB_HCA syntax
	// (a :port suffix, which must be 1, is dropped); "": the TCP links'.
	HCA string
	// GIDIndex: even selects RoCE v1 on the interface (raw Ethernet, its
	// link-local GID), odd or -1 RoCE v2 over UDP on its IPv4 address (as
	// in a Linux RoCE GID table: v1 and v2 entries alternate).
	GIDIndex int
	// Timeout and RetryCnt are the queue pairs' ACK timeout exponent and
	// retry count.
	Timeout, RetryCnt uint8
	// DeviceOptions are passed to the device (the tests inject faults).
	DeviceOptions []rdma.Option
}

// openRoCE opens this rank's device, or warns and returns nil (its links
// then stay on TCP, and so do its peers' links to it).
func (b *boot) openRoCE(tcpIface tcp.Interface) *rdma.Device {
	r := b.p.RoCE
	iface, err := r.iface(tcpIface)
	var d *rdma.Device
	if err == nil {
		if r.GIDIndex >= 0 && r.GIDIndex%2 == 0 {
			d, err = rdma.OpenV1(iface.Name, r.DeviceOptions...)
		} else {
			d, err = rdma.Open(iface.IP.String()+":0", r.DeviceOptions...)
		}
	}
	if err != nil {
		b.p.Log(slog.LevelWarn, "NET", nil, "%s=roce: no RoCE device for rank %d: %v; its links to other hosts stay on TCP", config.Net.Name, b.p.Rank, err)
		return nil
	}
	b.p.Log(slog.LevelInfo, "NET", nil, "RoCE v%d device %s on %s", d.Version(), rdma.GIDString(d.GID(), d.Addr().Port()), iface.Name)
	return d
}

// iface is the interface the device opens on.
func (r *RoCE) iface(tcpIface tcp.Interface) (tcp.Interface, error) {
	if r.HCA == "" {
		return tcpIface, nil
	}
	var specs []string
	for _, s := range strings.Split(r.HCA, ",") {
		if i := strings.LastIndexByte(s, ':'); i >= 0 {
			if port := s[i+1:]; port != "1" {
				return tcp.Interface{}, fmt.Errorf("%s=%q: port %q: the soft RoCE device has port 1 only", config.IBHCA.Name, r.HCA, port)
			}
			s = s[:i]
		}
		specs = append(specs, s)
	}
	sel, err := tcp.SelectInterface(strings.Join(specs, ","))
	if err != nil {
		return tcp.Interface{}, fmt.Errorf("%s=%q: %w", config.IBHCA.Name, r.HCA, err)
	}
	return sel, nil
}

// dialRoCE makes the RoCE link to ctrl's peer over b.dev (nil: none, the
// peer falls back too).
func (b *boot) dialRoCE(ctx context.Context, ctrl transport.Link) (transport.Link, error) {
	r := b.p.RoCE
	l, fallback, err := roce.Dial(ctx, ctrl, b.dom, roce.Options{Timeout: r.Timeout, RetryCnt: r.RetryCnt})
	if err != nil {
		ctrl.Close()
		return nil, err
	}
	if fallback && b.dom != nil {
		b.p.Log(slog.LevelWarn, "NET", []slog.Attr{slog.Int("peer", ctrl.Peer())},
			"%s=roce: rank %d has no RoCE device; the link to it stays on TCP", config.Net.Name, ctrl.Peer())
	}
	return l, nil
}
