package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/goccl/goccl/rdma"
	"github.com/goccl/goccl/rdma/qp"
)

// perftest-style tools over the soft RoCE device: one side runs as server
// (no address), the other with the server's address; they exchange QP
// numbers, PSNs, GIDs and the server's buffer over a TCP side channel
// (perftest's port 18515), then the client measures.

const megabyte = 1 << 20 // perftest's MB/sec unit

type rocePerf struct {
	name     string // write-bw, ...
	op       qp.WROpcode
	lat      bool
	size     int64
	all      bool
	iters    int
	port     int
	devPort  int
	txDepth  int
	timeout  time.Duration
	server   string
	pcap     string
	ifname   string // -d: RoCE v1 on this interface
	out, err io.Writer
}

func runRocePerf(name string, args []string, stdout, stderr io.Writer) int {
	p := &rocePerf{name: name, out: stdout, err: stderr, op: qp.WRWrite}
	switch name {
	case "write-lat":
		p.lat = true
	case "send-bw":
		p.op = qp.WRSend
	case "send-lat":
		p.op, p.lat = qp.WRSend, true
	case "read-bw":
		p.op = qp.WRRead
	case "read-lat":
		p.op, p.lat = qp.WRRead, true
	}
	fs := flag.NewFlagSet("goccl roce "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	defSize, defIters := int64(65536), 5000
	if p.lat {
		defSize, defIters = 2, 1000
	}
	size := sizeValue{v: &p.size}
	p.size = defSize
	fs.Var(size, "s", "message size in bytes (K, M, G or T suffix, 1024-based)")
	fs.Var(size, "size", "message size")
	fs.BoolVar(&p.all, "a", false, "all sizes from 2 bytes to 8 MiB, doubling")
	fs.IntVar(&p.iters, "n", defIters, "iterations per size")
	fs.IntVar(&p.port, "p", 18515, "TCP port of the side channel")
	fs.IntVar(&p.devPort, "dev-port", rdma.DefaultPort, "UDP port of the server's soft RoCE device (0: any)")
	fs.IntVar(&p.txDepth, "t", 128, "send queue depth: WRs outstanding (bandwidth tests)")
	fs.DurationVar(&p.timeout, "timeout", 60*time.Second, "give up after this long")
	fs.StringVar(&p.ifname, "d", "", "RoCE v1: send raw Ethernet frames (Ethertype 0x8915) on this interface (AF_PACKET; root); without it RoCE v2 over UDP")
	fs.StringVar(&p.pcap, "pcap", "", "record every frame sent and received to this pcap file (tshark dissects v2 frames as RRoCE, v1 frames as InfiniBand over Ethernet)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: goccl roce %s [-s SIZE | -a] [-n ITERS] [-p PORT] [-d IFNAME] [SERVER]\n\n", name)
		fmt.Fprintf(stderr, "Without SERVER: wait for a client on TCP port -p. With it: connect, run and print perftest's columns.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 1 || p.iters < 1 || p.size < 1 || p.size > 1<<30 || p.txDepth < 1 {
		fs.Usage()
		return 2
	}
	p.server = fs.Arg(0)
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	if err := p.run(ctx); err != nil {
		fmt.Fprintf(stderr, "goccl roce %s: %v\n", name, err)
		return 1
	}
	return 0
}

func (p *rocePerf) sizes() []int {
	if !p.all {
		return []int{int(p.size)}
	}
	var s []int
	for n := 2; n <= 8<<20; n *= 2 {
		s = append(s, n)
	}
	return s
}

func (p *rocePerf) run(ctx context.Context) error {
	var conn net.Conn
	var err error
	if p.server == "" {
		ln, lerr := net.Listen("tcp", ":"+strconv.Itoa(p.port))
		if lerr != nil {
			return lerr
		}
		fmt.Fprintf(p.out, "waiting for a client on TCP port %d\n", ln.Addr().(*net.TCPAddr).Port)
		stop := context.AfterFunc(ctx, func() { ln.Close() })
		conn, err = ln.Accept()
		stop()
		ln.Close()
	} else {
		var d net.Dialer
		conn, err = d.DialContext(ctx, "tcp", net.JoinHostPort(p.server, strconv.Itoa(p.port)))
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	// The device binds the address the side channel uses: the one the peer
	// reaches this host at.
	local := conn.LocalAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	devPort := 0
	if p.server == "" {
		devPort = p.devPort
	}
	var opts []rdma.Option
	if p.pcap != "" {
		f, err := os.Create(p.pcap)
		if err != nil {
			return err
		}
		defer f.Close()
		opts = append(opts, rdma.WithPcap(f))
	}
	var dev *rdma.Device
	if p.ifname != "" {
		if dev, err = rdma.OpenV1(p.ifname, opts...); err != nil {
			return err
		}
	} else if dev, err = rdma.Open(netip.AddrPortFrom(local, uint16(devPort)).String(), opts...); err != nil {
		return fmt.Errorf("%w (another soft RoCE device on this address? try -dev-port 0)", err)
	}
	defer dev.Close()
	maxSize := p.sizes()[len(p.sizes())-1]
	pd := dev.AllocPD()
	buf := make([]byte, maxSize)
	mr, err := pd.RegMR(buf, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
	if err != nil {
		return err
	}
	cq := dev.CreateCQ()
	q, err := pd.CreateQP(cq, cq)
	if err != nil {
		return err
	}
	me := q.LocalInfo(mr)
	peer, err := rdma.ExchangeConnInfo(ctx, conn, me)
	if err != nil {
		return err
	}
	if err := q.Connect(me, peer, rdma.ConnectOptions{}); err != nil {
		return err
	}
	p.header(dev, me, peer)
	br := bufio.NewReader(conn)
	switch {
	case p.lat && p.op != qp.WRRead:
		return p.pingPong(ctx, q, cq, mr, peer, conn, br)
	case p.server != "":
		for _, n := range p.sizes() {
			if p.op == qp.WRSend {
				// The server has posted its receives.
				if _, err := br.ReadString('\n'); err != nil {
					return err
				}
			}
			var err error
			if p.lat {
				err = p.readLat(ctx, q, cq, mr, peer, n)
			} else {
				err = p.bw(ctx, q, cq, mr, peer, n)
			}
			if err != nil {
				return err
			}
		}
		fmt.Fprintln(conn, "done")
	case p.op == qp.WRSend:
		for _, n := range p.sizes() {
			if err := p.receiveSends(ctx, q, cq, mr, conn, n); err != nil {
				return err
			}
		}
		if _, err := br.ReadString('\n'); err != nil {
			return fmt.Errorf("waiting for the client to finish: %w", err)
		}
	default:
		if _, err := br.ReadString('\n'); err != nil {
			return fmt.Errorf("waiting for the client to finish: %w", err)
		}
	}
	fmt.Fprintln(p.out, "---------------------------------------------------------------------------------------")
	return nil
}

func (p *rocePerf) header(dev *rdma.Device, me, peer rdma.ConnInfo) {
	title := map[qp.WROpcode]string{qp.WRWrite: "RDMA_Write", qp.WRRead: "RDMA_Read", qp.WRSend: "Send"}[p.op]
	kind := "BW"
	if p.lat {
		kind = "Latency"
	}
	fmt.Fprintln(p.out, "---------------------------------------------------------------------------------------")
	if dev.Version() == 1 {
		fmt.Fprintf(p.out, "                    %s %s Test (goccl soft RoCE v1 over Ethernet on %s, MTU %d)\n", title, kind, p.ifname, dev.ActiveMTU())
		fmt.Fprintf(p.out, " local address: QPN %#06x PSN %#06x GID %v\n", me.QPN, me.PSN, netip.AddrFrom16(dev.GID()))
		fmt.Fprintf(p.out, " remote address: QPN %#06x PSN %#06x GID %v\n", peer.QPN, peer.PSN, netip.AddrFrom16(peer.GID))
	} else {
		fmt.Fprintf(p.out, "                    %s %s Test (goccl soft RoCE v2 over UDP)\n", title, kind)
		fmt.Fprintf(p.out, " local address: QPN %#06x PSN %#06x GID %v port %d\n", me.QPN, me.PSN, netip.AddrFrom16(dev.GID()).Unmap(), dev.Addr().Port())
		fmt.Fprintf(p.out, " remote address: QPN %#06x PSN %#06x GID %v port %d\n", peer.QPN, peer.PSN, netip.AddrFrom16(peer.GID).Unmap(), peer.Port)
	}
	fmt.Fprintln(p.out, "---------------------------------------------------------------------------------------")
	if p.lat {
		fmt.Fprintln(p.out, " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]")
	} else {
		fmt.Fprintln(p.out, " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]")
	}
}

// bw keeps up to txDepth WRs of n bytes outstanding until iters complete.
func (p *rocePerf) bw(ctx context.Context, q *rdma.QP, cq *rdma.CQ, mr *rdma.MR, peer rdma.ConnInfo, n int) error {
	if n > peer.Len {
		return fmt.Errorf("message of %d bytes exceeds the server's %d-byte buffer (give both sides the same -s or -a)", n, peer.Len)
	}
	posted, done := 0, 0
	if p.op == qp.WRSend {
		peer.Addr, peer.RKey = 0, 0
	}
	stamps := make([]time.Time, 0, p.iters)
	start := time.Now()
	for done < p.iters {
		for posted < p.iters && posted-done < p.txDepth {
			if err := q.PostSend(rdma.SendWR{ID: uint64(posted), Opcode: p.op, MR: mr, Length: n, RemoteAddr: peer.Addr, RKey: peer.RKey}); err != nil {
				return err
			}
			posted++
		}
		wcs, err := cq.Wait(ctx, p.txDepth)
		if err != nil {
			return err
		}
		now := time.Now()
		for _, wc := range wcs {
			if wc.Status != qp.StatusSuccess {
				return fmt.Errorf("WR %d completed with %v", wc.WRID, wc.Status)
			}
			done++
			stamps = append(stamps, now)
		}
	}
	elapsed := time.Since(start).Seconds()
	avg := float64(n) * float64(p.iters) / elapsed / megabyte
	// Peak: the best tenth of the run, counted in blocks of at least two
	// send-queue depths (completions arrive in bursts of up to one).
	peak := avg
	if k := max(p.iters/10, 2*p.txDepth); k < p.iters {
		prev := start
		for i := k - 1; i < len(stamps); i += k {
			if d := stamps[i].Sub(prev).Seconds(); d > 0 {
				peak = math.Max(peak, float64(n)*float64(k)/d/megabyte)
			}
			prev = stamps[i]
		}
	}
	fmt.Fprintf(p.out, " %-10d %-10d       %-18.2f %-20.2f %.6f\n", n, p.iters, peak, avg, float64(p.iters)/elapsed/1e6)
	return nil
}

// pingPong is write-lat's and send-lat's ping-pong: each side learns of the
// peer's message from its receive completion. write-lat uses RDMA WRITE
// with immediate for that (perftest polls the last byte of the buffer
// instead; a Go program may not read memory another goroutine writes without
// synchronizing). Latency is half the round trip.
func (p *rocePerf) pingPong(ctx context.Context, q *rdma.QP, cq *rdma.CQ, mr *rdma.MR, peer rdma.ConnInfo, conn net.Conn, br *bufio.Reader) error {
	client := p.server != ""
	for _, n := range p.sizes() {
		if n > peer.Len {
			return fmt.Errorf("message of %d bytes exceeds the peer's %d-byte buffer", n, peer.Len)
		}
		for i := 0; i < p.iters+1; i++ {
			rwr := rdma.RecvWR{ID: uint64(i)}
			if p.op == qp.WRSend {
				rwr.MR, rwr.Length = mr, n // SENDs land in the receive buffer
			}
			if err := q.PostRecv(rwr); err != nil {
				return err
			}
		}
		// Both sides have their receives posted before the first WRITE.
		fmt.Fprintln(conn, "ready")
		if _, err := br.ReadString('\n'); err != nil {
			return err
		}
		rtts := make([]float64, 0, p.iters)
		write := func(i int) error {
			if p.op == qp.WRSend {
				return q.PostSend(rdma.SendWR{ID: uint64(i), Opcode: qp.WRSend, MR: mr, Length: n})
			}
			return q.PostSend(rdma.SendWR{ID: uint64(i), Opcode: qp.WRWriteImm, MR: mr, Length: n, RemoteAddr: peer.Addr, RKey: peer.RKey, Imm: uint32(i)})
		}
		// waitRecv waits for the peer's WRITE (a receive completion);
		// send completions of this side's WRITEs are skipped.
		waitRecv := func() error {
			for {
				wcs, err := cq.Wait(ctx, 1)
				if err != nil {
					return err
				}
				for _, wc := range wcs {
					if wc.Status != qp.StatusSuccess {
						return fmt.Errorf("WR %d completed with %v", wc.WRID, wc.Status)
					}
					if wc.Opcode == qp.CQRecvWriteImm || wc.Opcode == qp.CQRecv {
						return nil
					}
				}
			}
		}
		for i := 0; i < p.iters; i++ {
			if client {
				t0 := time.Now()
				if err := write(i); err != nil {
					return err
				}
				if err := waitRecv(); err != nil {
					return err
				}
				rtts = append(rtts, float64(time.Since(t0).Nanoseconds())/1e3)
			} else {
				if err := waitRecv(); err != nil {
					return err
				}
				if err := write(i); err != nil {
					return err
				}
			}
		}
		if client {
			p.latLine(n, rtts)
		}
	}
	fmt.Fprintln(p.out, "---------------------------------------------------------------------------------------")
	return nil
}

func (p *rocePerf) latLine(n int, rtts []float64) {
	half := make([]float64, len(rtts))
	var sum float64
	for i, r := range rtts {
		half[i] = r / 2
		sum += half[i]
	}
	sort.Float64s(half)
	avg := sum / float64(len(half))
	var sq float64
	for _, h := range half {
		sq += (h - avg) * (h - avg)
	}
	pct := func(f float64) float64 { return half[min(len(half)-1, int(f*float64(len(half))))] }
	fmt.Fprintf(p.out, " %-7d %-10d %-13.2f %-13.2f %-13.2f %-13.2f %-13.2f %-22.2f %.2f\n", n, len(half), half[0], half[len(half)-1],
		half[len(half)/2], avg, math.Sqrt(sq/float64(len(half))), pct(0.99), pct(0.999))
}

// receiveSends is send-bw's server side for one size: it keeps receives
// posted (up to 512), tells the client it may start, and reposts each one
// that completes until iters SENDs have arrived.
func (p *rocePerf) receiveSends(ctx context.Context, q *rdma.QP, cq *rdma.CQ, mr *rdma.MR, conn net.Conn, n int) error {
	const rxDepth = 512
	posted := 0
	for posted < min(rxDepth, p.iters) {
		if err := q.PostRecv(rdma.RecvWR{ID: uint64(posted), MR: mr, Length: n}); err != nil {
			return err
		}
		posted++
	}
	fmt.Fprintln(conn, "ready")
	for got := 0; got < p.iters; {
		wcs, err := cq.Wait(ctx, rxDepth)
		if err != nil {
			return err
		}
		for _, wc := range wcs {
			if wc.Status != qp.StatusSuccess {
				return fmt.Errorf("receive %d completed with %v", wc.WRID, wc.Status)
			}
			got++
			if posted < p.iters {
				if err := q.PostRecv(rdma.RecvWR{ID: uint64(posted), MR: mr, Length: n}); err != nil {
					return err
				}
				posted++
			}
		}
	}
	return nil
}

// readLat times one RDMA READ of n bytes at a time; a READ is a round trip
// by itself, so the full time is reported (as ib_read_lat does).
func (p *rocePerf) readLat(ctx context.Context, q *rdma.QP, cq *rdma.CQ, mr *rdma.MR, peer rdma.ConnInfo, n int) error {
	if n > peer.Len {
		return fmt.Errorf("message of %d bytes exceeds the server's %d-byte buffer", n, peer.Len)
	}
	rtts := make([]float64, 0, p.iters)
	for i := 0; i < p.iters; i++ {
		t0 := time.Now()
		if err := q.PostSend(rdma.SendWR{ID: uint64(i), Opcode: qp.WRRead, MR: mr, Length: n, RemoteAddr: peer.Addr, RKey: peer.RKey}); err != nil {
			return err
		}
		wcs, err := cq.Wait(ctx, 1)
		if err != nil {
			return err
		}
		if wcs[0].Status != qp.StatusSuccess {
			return fmt.Errorf("READ %d completed with %v", wcs[0].WRID, wcs[0].Status)
		}
		// latLine halves its input: give it twice the READ's time.
		rtts = append(rtts, 2*float64(time.Since(t0).Nanoseconds())/1e3)
	}
	p.latLine(n, rtts)
	return nil
}
