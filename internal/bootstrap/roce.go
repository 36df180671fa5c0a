package bootstrap

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/rdma"
	"github.com/goccl/goccl/rdma/qp"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/rails"
	"github.com/goccl/goccl/transport/roce"
	"github.com/goccl/goccl/transport/tcp"
)

// roceNet, with GOCCL_NET=roce, carries the links that would be TCP over RC
// queue pairs of a soft RoCE device (transport/roce), each made over the
// TCP link to the same peer, which stays as its control channel. A rank
// that cannot open its device keeps TCP, and so do its peers' links to it.
type roceNet struct {
	on bool // GOCCL_NET=roce
	// hca selects the interface the device opens on, in NCCL_IB_HCA syntax
	// (a :port suffix, which must be 1, is dropped); "": the TCP links'.
	hca string
	// gidIndex: even selects RoCE v1 on the interface (raw Ethernet, its
	// link-local GID), odd or -1 RoCE v2 over UDP on its IPv4 address (as
	// in a Linux RoCE GID table: v1 and v2 entries alternate).
	gidIndex int
	// timeout and retryCnt are the queue pairs' ACK timeout exponent and
	// retry count.
	timeout, retryCnt uint8
	nsocks            int           // sockets of the TCP control links
	devOpts           []rdma.Option // SetRoCEDeviceOptions's
	qps               int           // queue pairs per connection (GOCCL_IB_QPS_PER_CONNECTION)
}

// roceDeviceOptions are given to every RoCE device a Connect opens: set
// only by tests (SetRoCEDeviceOptions).
var roceDeviceOptions []rdma.Option

// SetRoCEDeviceOptions makes the RoCE devices of the Connect calls whose
// Transports FromEnv reads from now on get opts (tests inject faults).
func SetRoCEDeviceOptions(opts ...rdma.Option) { roceDeviceOptions = opts }

// roceFromEnv reads GOCCL_NET and, for roce, the device's variables.
func roceFromEnv() (provider, error) {
	net, err := config.Net.Word()
	if err != nil || net != "roce" {
		return roceNet{}, err
	}
	r := roceNet{on: true, hca: config.IBHCA.Get(), gidIndex: -1, devOpts: roceDeviceOptions}
	timeout, retry := 0, 0
	r.qps = 1
	for _, v := range []struct {
		dst *int
		v   *config.Var
	}{{&r.gidIndex, config.IBGIDIndex}, {&timeout, config.IBTimeout}, {&retry, config.IBRetryCnt}, {&r.qps, config.IBQPsPerConnection}} {
		n, ok, err := v.v.Int()
		if err != nil {
			return nil, err
		}
		if ok {
			*v.dst = n
		}
	}
	r.timeout, r.retryCnt = uint8(timeout), uint8(retry)
	cc, err := congestionOptions()
	if err != nil {
		return nil, err
	}
	r.devOpts = append(cc, r.devOpts...)
	if r.qps > 1 {
		r.devOpts = append(r.devOpts, rdma.WithSourcePorts(r.qps))
	}
	r.nsocks, err = nsocksFromEnv()
	return r, err
}

// congestionOptions are the devices' options for GOCCL_IB_TC and
// GOCCL_IB_DCQCN.
func congestionOptions() ([]rdma.Option, error) {
	var opts []rdma.Option
	tc, _, err := config.IBTC.Int()
	if err != nil {
		return nil, err
	}
	if tc > 0 {
		opts = append(opts, rdma.WithTrafficClass(tc))
	}
	mbps, _, err := config.IBDCQCN.Int()
	if err != nil {
		return nil, err
	}
	if mbps > 0 {
		cc := qp.DefaultDCQCN(float64(mbps) * 1e6 / 8)
		if err := cc.Set(config.IBDCQCNParams.Get()); err != nil {
			return nil, fmt.Errorf("%s: %w", config.IBDCQCNParams.Name, err)
		}
		opts = append(opts, rdma.WithDCQCN(cc))
	}
	return opts, nil
}

// usable: GOCCL_NET=roce, for any peer the rows before leave.
func (r roceNet) usable(_, _ card) bool { return r.on }

// connect opens this rank's devices, one per rail (GOCCL_NET=roce, with
// or without peers: Register and windows use rail 0's domain), and dials
// every peer over its TCP link on each rail, then over that rail's device.
func (r roceNet) connect(ctx context.Context, b *boot, peers []bool) error {
	if !r.on {
		return nil
	}
	var doms []*roce.Domain
	for _, dev := range r.open(b) {
		b.closers = append(b.closers, dev.Close)
		dom := roce.NewDomain(dev)
		dom.Timeout, dom.RetryCnt = r.timeout, r.retryCnt
		doms = append(doms, dom)
	}
	err := b.dialEach(ctx, peers, func(ctx context.Context, p int) (transport.Link, error) {
		return b.dialRails(ctx, p, r.nsocks, func(ctx context.Context, i int, tag uint16) (transport.Link, error) {
			ctrl, err := b.rails[i].ep.ConnectTag(ctx, p, b.railAddr(p, i), r.nsocks, tag)
			if err != nil {
				return nil, err
			}
			var dom *roce.Domain
			if i < len(doms) {
				dom = doms[i]
			}
			return r.dial(ctx, b, dom, ctrl)
		})
	})
	if err != nil || len(doms) == 0 {
		return err
	}
	one := &OneSided{Domain: doms[0], Peers: make([]bool, len(peers))}
	for p, l := range b.links {
		_, one.Peers[p] = l.(*roce.Link)
	}
	b.caps = append(b.caps, registrar{doms[0]}, one)
	return nil
}

// registrar registers memory in a RoCE domain.
type registrar struct{ d *roce.Domain }

func (r registrar) Register(b []byte) (Region, error) {
	reg, err := r.d.Register(b)
	if err != nil {
		return nil, err
	}
	return reg, nil
}

// open opens this rank's devices, one per rail (rail i's on GOCCL_IB_HCA's
// i-th interface, or on the rail's own), or warns and returns those it
// opened before one failed (the links of the rails without one, and the
// peers' links to them, stay on TCP).
func (r roceNet) open(b *boot) []*rdma.Device {
	ifaces, err := r.ifaces(b)
	var devs []*rdma.Device
	for _, iface := range ifaces {
		var d *rdma.Device
		if r.gidIndex >= 0 && r.gidIndex%2 == 0 {
			d, err = rdma.OpenV1(iface.Name, r.devOpts...)
		} else {
			d, err = rdma.Open(iface.IP.String()+":0", r.devOpts...)
		}
		if err != nil {
			break
		}
		b.p.Log(slog.LevelInfo, "NET", nil, "RoCE v%d device %s on %s", d.Version(), rdma.GIDString(d.GID(), d.Addr().Port()), iface.Name)
		devs = append(devs, d)
	}
	if err != nil {
		b.p.Log(slog.LevelWarn, "NET", nil, "%s=roce: no RoCE device for rank %d on rail %d: %v; its links to other hosts on that rail stay on TCP", config.Net.Name, b.p.Rank, len(devs), err)
	}
	return devs
}

// ifaces are the interfaces the devices open on: GOCCL_IB_HCA's, else the
// rails'; at most one per rail (a device's control links run over its
// rail's TCP endpoint).
func (r roceNet) ifaces(b *boot) ([]tcp.Interface, error) {
	var own []tcp.Interface
	for _, rl := range b.rails {
		own = append(own, rl.iface)
	}
	if r.hca == "" {
		return own, nil
	}
	var specs []string
	for _, s := range strings.Split(r.hca, ",") {
		if i := strings.LastIndexByte(s, ':'); i >= 0 {
			if port := s[i+1:]; port != "1" {
				return nil, fmt.Errorf("%s=%q: port %q: the soft RoCE device has port 1 only", config.IBHCA.Name, r.hca, port)
			}
			s = s[:i]
		}
		specs = append(specs, s)
	}
	sel, err := tcp.SelectInterfaces(strings.Join(specs, ","))
	if err != nil {
		return nil, fmt.Errorf("%s=%q: %w", config.IBHCA.Name, r.hca, err)
	}
	if len(sel) > len(own) {
		b.p.Log(slog.LevelWarn, "NET", nil, "%s=%q names %d interfaces, but %s gives %d rails: the devices on %d of them go unused (each needs a rail of its own for its control links)",
			config.IBHCA.Name, r.hca, len(sel), config.SocketIfname.Name, len(own), len(sel)-len(own))
		sel = sel[:len(own)]
	}
	return sel, nil
}

// dial makes the RoCE link to ctrl's peer in dom (nil: no device, the peer
// falls back too): one queue pair, or with GOCCL_IB_QPS_PER_CONNECTION
// several, each on its own UDP source port, under a rails.Link that splits
// messages over them.
func (r roceNet) dial(ctx context.Context, b *boot, dom *roce.Domain, ctrl transport.Link) (transport.Link, error) {
	links, fallback, err := roce.DialQPs(ctx, ctrl, dom, roce.Options{Timeout: r.timeout, RetryCnt: r.retryCnt}, r.qps)
	if err != nil {
		ctrl.Close()
		return nil, err
	}
	l := links[0]
	if len(links) > 1 {
		qps := make([]rails.Rail, len(links))
		for i, q := range links {
			qps[i] = rails.Rail{Link: q, Iface: fmt.Sprintf("qp%d", i)}
		}
		if l, err = rails.New(qps, rails.Options{Unit: "queue pairs"}); err != nil {
			for _, q := range links {
				q.Close()
			}
			return nil, err
		}
	}
	if fallback && dom != nil {
		b.p.Log(slog.LevelWarn, "NET", []slog.Attr{slog.Int("peer", ctrl.Peer())},
			"%s=roce: rank %d has no RoCE device; the link to it stays on TCP", config.Net.Name, ctrl.Peer())
	}
	return l, nil
}
