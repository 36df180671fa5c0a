package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/internal/cluster"
	"github.com/goccl/goccl/rdma"
	"github.com/goccl/goccl/rdma/qp"
)

// perftest-style tools over the soft RoCE device: one side runs as server
// (no address), the other with the server's address; they exchange QP
// numbers, PSNs, GIDs and the server's buffer over a TCP side channel
// (perftest's port 18515), then the client measures.

const (
	megabyte    = 1 << 20   // perftest's MB/sec unit
	roceGigabit = 125000000 // bytes in perftest's Gb/sec unit (--report_gbits): 10^9 bits
)

type rocePerf struct {
	name      string // write-bw, ...
	op        qp.WROpcode
	lat       bool
	size      int64
	all       bool
	iters     int
	port      int
	devPort   int
	txDepth   int
	timeout   time.Duration
	server    string
	pcap      string
	ifname    string        // -d: RoCE v1 on this interface
	gbits     bool          // --report_gbits
	dcqcn     cluster.Rate  // --dcqcn: DCQCN at this line rate (bits/s); 0: off
	ccParams  string        // --dcqcn-params: mlx5-named parameters (qp.DCQCN.Set)
	tclass    int           // --tclass: the traffic class (DSCP << 2) of RoCE v2 packets
	bidir     bool          // -b: both sides send at once (write-bw, read-bw)
	rateLog   string        // --rate-log: the client's samples of its progress and DCQCN rate go here
	rateEvery time.Duration // --rate-interval
	done      atomic.Int64  // bytes completed so far (bw), for the rate log
	out, err  io.Writer
}

func runRocePerf(name string, args []string, stdout, stderr io.Writer) int {
	p, status := parseRocePerf(name, args, stdout, stderr)
	if p == nil {
		return status
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	if err := p.run(ctx); err != nil {
		fmt.Fprintf(stderr, "goccl roce %s: %v\n", name, err)
		return 1
	}
	return 0
}

// parseRocePerf parses the command line of the tool name. Flags come
// before, between or after SERVER (perftest's getopt_long permutes them
// so: "ib_write_bw 10.0.0.1 -s 1K"); everything after "--" is positional.
// It returns the tool, or nil and the exit status (0 for -h, 2 for a usage
// error, which it has reported).
func parseRocePerf(name string, args []string, stdout, stderr io.Writer) (*rocePerf, int) {
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
	cmd := "goccl roce " + name
	fs := newFlags(cmd, stderr, func(fs *cliFlags) {
		w := fs.Output()
		fmt.Fprintf(w, "usage: %s [-s SIZE | -a] [-n ITERS] [-p PORT] [-d IFNAME] [--report_gbits] [SERVER]\n\n", cmd)
		fmt.Fprintf(w, "Without SERVER: wait for a client on TCP port -p. With it: connect, run and print perftest's columns.\n")
		fmt.Fprintf(w, "Flags may come before or after SERVER, as with perftest; long ones take two dashes or one (--pcap, -pcap).\n\n")
		fs.PrintDefaults()
	})
	defSize, defIters := int64(65536), 5000
	if p.lat {
		defSize, defIters = 2, 1000
	}
	p.size = defSize
	// perftest's letters and long names (-d is its --ib-dev).
	fs.VarP(sizeValue{v: &p.size}, "size", "s", "message size in bytes (K, M, G or T suffix, 1024-based)")
	fs.BoolVarP(&p.all, "all", "a", false, "all sizes from 2 bytes to 8 MiB, doubling")
	fs.IntVarP(&p.iters, "iters", "n", defIters, "iterations per size")
	fs.IntVarP(&p.port, "port", "p", 18515, "TCP port of the side channel")
	fs.IntVarP(&p.txDepth, "tx-depth", "t", 128, "send queue depth: WRs outstanding (bandwidth tests)")
	fs.StringVarP(&p.ifname, "ib-dev", "d", "", "RoCE v1: send raw Ethernet frames (Ethertype 0x8915) on this interface (AF_PACKET; root); without it RoCE v2 over UDP")
	fs.BoolVarP(&p.bidir, "bidirectional", "b", false, "both sides send at once; the client reports the sum of both directions, as perftest's -b (write-bw, read-bw)")
	fs.BoolVar(&p.gbits, "report_gbits", false, "report bandwidth in Gb/sec (10^9 bits) instead of MB/sec (2^20 bytes), as perftest's --report_gbits")
	// goccl's own.
	fs.IntVar(&p.devPort, "dev-port", rdma.DefaultPort, "UDP port of the server's soft RoCE device (0: any)")
	fs.DurationVar(&p.timeout, "timeout", 60*time.Second, "give up after this long")
	fs.StringVar(&p.pcap, "pcap", "", "record every frame sent and received to this pcap file (tshark dissects v2 frames as RRoCE, v1 frames as InfiniBand over Ethernet)")
	fs.Var(&p.dcqcn, "dcqcn", "RoCE v2 congestion control: DCQCN with ConnectX's defaults at this line rate (tc units: 100mbit, 1gbit; 0: off); packets leave ECN-capable")
	fs.StringVar(&p.ccParams, "dcqcn-params", "", "with --dcqcn, parameters other than ConnectX's defaults by their mlx5 names and units, name=value,... (rpg_time_reset=9ms,min_time_between_cnps=4ms,...; times in µs or with a unit)")
	fs.StringVar(&p.rateLog, "rate-log", "", "bandwidth tests' client: write a CSV sample of the bytes completed, the DCQCN rate and counters to this file every --rate-interval (goccl roce rate-plot draws it)")
	fs.DurationVar(&p.rateEvery, "rate-interval", 10*time.Millisecond, "the rate log's sampling interval")
	fs.IntVar(&p.tclass, "tclass", 0, "traffic class of RoCE v2 packets: the IPv4 TOS byte's DSCP bits (NCCL_IB_TC's role; 0 to 252, a multiple of 4)")
	if status, exit := fs.parseOrExit(args); exit {
		return nil, status
	}
	hosts := fs.Args()
	usageErr := func(format string, a ...any) (*rocePerf, int) {
		fmt.Fprintf(stderr, "%s: %s\n", cmd, fmt.Sprintf(format, a...))
		fmt.Fprintf(stderr, "run '%s -h' for the flags\n", cmd)
		return nil, 2
	}
	switch {
	case len(hosts) > 1:
		return usageErr("one SERVER at most, got %d: %q", len(hosts), hosts)
	case p.iters < 1:
		return usageErr("-n %d: at least one iteration", p.iters)
	case p.size < 1 || p.size > 1<<30:
		return usageErr("-s %d: the size is 1 byte to 1 GiB", p.size)
	case p.txDepth < 1:
		return usageErr("-t %d: the send queue depth is at least 1", p.txDepth)
	case p.tclass < 0 || p.tclass > 252 || p.tclass%4 != 0:
		return usageErr("--tclass %d: a DSCP value shifted left by 2: 0 to 252, a multiple of 4", p.tclass)
	case p.rateEvery <= 0:
		return usageErr("--rate-interval %v: a positive interval", p.rateEvery)
	case p.bidir && (p.lat || p.op == qp.WRSend):
		return usageErr("-b: bidirectional runs are for write-bw and read-bw")
	case p.ccParams != "" && p.dcqcn == 0:
		return usageErr("--dcqcn-params without --dcqcn: give the line rate too")
	}
	if cc := qp.DefaultDCQCN(1); p.ccParams != "" {
		if err := cc.Set(p.ccParams); err != nil {
			return usageErr("--dcqcn-params: %v", err)
		}
	}
	if len(hosts) == 1 {
		p.server = hosts[0]
	}
	return p, 0
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
	if p.dcqcn > 0 {
		cc := qp.DefaultDCQCN(float64(p.dcqcn) / 8)
		if err := cc.Set(p.ccParams); err != nil {
			return fmt.Errorf("--dcqcn-params: %w", err)
		}
		opts = append(opts, rdma.WithDCQCN(cc))
	}
	if p.tclass > 0 {
		opts = append(opts, rdma.WithTrafficClass(p.tclass))
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
	if p.rateLog != "" && p.server != "" && !p.lat {
		stop, err := p.startRateLog(q, me, peer)
		if err != nil {
			return err
		}
		defer stop()
	}
	br := bufio.NewReader(conn)
	switch {
	case p.bidir:
		if err := p.bidirectional(ctx, q, cq, mr, peer, conn, br); err != nil {
			return err
		}
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
				var r bwResult
				if r, err = p.bw(ctx, q, cq, mr, peer, n); err == nil {
					p.bwLine(n, r)
				}
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
	if p.dcqcn > 0 {
		st, rate := q.CCStats()
		qs := q.Stats()
		fmt.Fprintf(p.out, " DCQCN: %d CE-marked packets received, %d CNPs sent, %d received, %d rate cuts, rate now %.1f Mbit/s of %v; %d packets resent (%d timeouts, %d sequence NAKs)\n",
			dev.Stats().CEReceived, st.CNPsSent, st.CNPsReceived, st.RateCuts, rate*8/1e6, p.dcqcn, qs.Retransmits, qs.Timeouts, qs.SeqNAKs)
		ds := dev.Stats()
		fmt.Fprintf(p.out, " device: %d packets sent, %d received (%d ICRC errors, %d malformed, %d for no QP, %d from a foreign source); responder: %d duplicates, %d out of sequence, %d sequence NAKs sent\n",
			ds.PacketsSent, ds.PacketsReceived, ds.ICRCErrors, ds.Malformed, ds.UnknownQP, ds.ForeignSource, qs.Duplicates, qs.OutOfSequence, qs.SeqNAKsSent)
	}
	return nil
}

const roceResultLine = "---------------------------------------------------------------------------------------"

// header prints perftest's parameter banner (ctx_print_test_info), the two
// sides' addresses (ctx_print_pingpong_data) and the column titles, with
// goccl's values: one RC QP, no inline data, no SRQ, every WR signalled,
// the QP numbers and buffers exchanged over TCP (perftest's "Ethernet"
// exchange method). Each address line ends with the side's soft RoCE UDP
// port (v2), where perftest puts its transport's extra fields.
func (p *rocePerf) header(dev *rdma.Device, me, peer rdma.ConnInfo) {
	title := map[qp.WROpcode]string{qp.WRWrite: "RDMA_Write", qp.WRRead: "RDMA_Read", qp.WRSend: "Send"}[p.op]
	kind := "BW"
	if p.lat {
		kind = "Latency"
	}
	client := p.server != ""
	ifname, version := p.ifname, "v2 over UDP"
	if dev.Version() == 1 {
		version = "v1 over Ethernet"
	} else {
		ifname = roceInterface(dev.Addr().Addr())
	}
	mtu := dev.ActiveMTU()
	if peer.MTU > 0 && peer.MTU < mtu {
		mtu = peer.MTU
	}
	w := p.out
	fmt.Fprintln(w, roceResultLine)
	fmt.Fprintf(w, "                    %s %s Test\n", title, kind)
	fmt.Fprintf(w, " Dual-port       : OFF\t\tDevice         : goccl_%s\n", ifname)
	fmt.Fprintf(w, " Number of qps   : 1\t\tTransport type : IB\n")
	fmt.Fprintf(w, " Connection type : RC\t\tUsing SRQ      : OFF\n")
	fmt.Fprintf(w, " RoCE            : %s (goccl soft RoCE)\n", version)
	switch {
	case p.lat:
		fmt.Fprintf(w, " TX depth        : 1\n")
	case client:
		fmt.Fprintf(w, " TX depth        : %d\n", p.txDepth)
	}
	if p.op == qp.WRSend && (p.lat || !client) {
		rx := min(512, p.iters) // receiveSends' depth
		if p.lat {
			rx = p.iters + 1 // pingPong posts them all first
		}
		fmt.Fprintf(w, " RX depth        : %d\n", rx)
	}
	if !p.lat {
		fmt.Fprintf(w, " CQ Moderation   : 1\n") // every WR signalled
	}
	fmt.Fprintf(w, " Mtu             : %d[B]\n", mtu)
	fmt.Fprintf(w, " Link type       : Ethernet\n")
	if p.op == qp.WRRead {
		fmt.Fprintf(w, " Outstand reads  : %d\n", qp.MaxRdAtomic)
	} else {
		fmt.Fprintf(w, " Max inline data : 0[B]\n")
	}
	fmt.Fprintf(w, " rdma_cm QPs\t : OFF\n")
	fmt.Fprintf(w, " Data ex. method : Ethernet\n")
	fmt.Fprintln(w, roceResultLine)
	p.address(dev.Version(), "local", me)
	p.address(dev.Version(), "remote", peer)
	fmt.Fprintln(w, roceResultLine)
	switch {
	case p.lat:
		fmt.Fprintln(w, " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]")
	case p.gbits:
		fmt.Fprintln(w, " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]")
	default:
		fmt.Fprintln(w, " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]")
	}
}

// address prints one side's line as perftest does (LID 0 on RoCE; OUT, RKey
// and VAddr for READ, RKey and VAddr for WRITE) and its GID line, bytes in
// decimal as perftest prints them.
func (p *rocePerf) address(version int, side string, ci rdma.ConnInfo) {
	fmt.Fprintf(p.out, " %s address: LID %s QPN %s PSN %s", side, roceHex(0, 4), roceHex(uint64(ci.QPN), 6), roceHex(uint64(ci.PSN), 6))
	switch p.op {
	case qp.WRRead:
		fmt.Fprintf(p.out, " OUT %s", roceHex(qp.MaxRdAtomic, 4))
		fallthrough
	case qp.WRWrite:
		fmt.Fprintf(p.out, " RKey %s VAddr %s", roceHex(uint64(ci.RKey), 8), roceHex(ci.Addr, 16))
	}
	if version == 2 {
		fmt.Fprintf(p.out, " UDP port %d", ci.Port)
	}
	fmt.Fprintln(p.out)
	fmt.Fprint(p.out, " GID: ")
	for i, b := range ci.GID {
		if i > 0 {
			fmt.Fprint(p.out, ":")
		}
		fmt.Fprintf(p.out, "%02d", b)
	}
	fmt.Fprintln(p.out)
}

// roceHex formats v as C's printf("%#0*x", width, v): the width counts the
// 0x (Go's %#0*x does not), and zero has none.
func roceHex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, v)
	}
	return fmt.Sprintf("0x%0*x", width-2, v)
}

// roceInterface names the interface that has address a (the device's name is
// goccl_ and it, as goccl roce devinfo lists it), or "any" for an address
// no interface has.
func roceInterface(a netip.Addr) string {
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, ad := range addrs {
			if ipn, ok := ad.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipn.IP); ok && ip.Unmap() == a.Unmap() {
					return ifc.Name
				}
			}
		}
	}
	return "any"
}

// bw keeps up to txDepth WRs of n bytes outstanding until iters complete.
// bwResult is one side's bandwidth figures in the report's unit.
type bwResult struct{ peak, avg, mpps float64 }

func (p *rocePerf) bwLine(n int, r bwResult) {
	fmt.Fprintf(p.out, " %-10d %-10d       %-18.2f %-20.2f %.6f\n", n, p.iters, r.peak, r.avg, r.mpps)
}

// bidirectional runs each size from both sides at once (perftest's -b):
// the client says "go", both post their WRs, the server sends its figures
// back and the client prints the sums.
func (p *rocePerf) bidirectional(ctx context.Context, q *rdma.QP, cq *rdma.CQ, mr *rdma.MR, peer rdma.ConnInfo, conn net.Conn, br *bufio.Reader) error {
	for _, n := range p.sizes() {
		if p.server != "" {
			fmt.Fprintln(conn, "go")
		} else if _, err := br.ReadString('\n'); err != nil {
			return fmt.Errorf("waiting for the client: %w", err)
		}
		r, err := p.bw(ctx, q, cq, mr, peer, n)
		if err != nil {
			return err
		}
		if p.server == "" {
			fmt.Fprintf(conn, "%g %g %g\n", r.peak, r.avg, r.mpps)
			continue
		}
		line, err := br.ReadString('\n')
		if err != nil {
			return fmt.Errorf("waiting for the server's figures: %w", err)
		}
		var s bwResult
		if _, err := fmt.Sscan(line, &s.peak, &s.avg, &s.mpps); err != nil {
			return fmt.Errorf("the server's figures %q: %w", line, err)
		}
		p.bwLine(n, bwResult{r.peak + s.peak, r.avg + s.avg, r.mpps + s.mpps})
	}
	if p.server != "" {
		fmt.Fprintln(conn, "done")
		return nil
	}
	_, err := br.ReadString('\n')
	return err
}

func (p *rocePerf) bw(ctx context.Context, q *rdma.QP, cq *rdma.CQ, mr *rdma.MR, peer rdma.ConnInfo, n int) (bwResult, error) {
	if n > peer.Len {
		return bwResult{}, fmt.Errorf("message of %d bytes exceeds the server's %d-byte buffer (give both sides the same -s or -a)", n, peer.Len)
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
				return bwResult{}, err
			}
			posted++
		}
		wcs, err := cq.Wait(ctx, p.txDepth)
		if err != nil {
			return bwResult{}, err
		}
		now := time.Now()
		for _, wc := range wcs {
			if wc.Status != qp.StatusSuccess {
				return bwResult{}, fmt.Errorf("WR %d completed with %v", wc.WRID, wc.Status)
			}
			done++
			p.done.Add(int64(n))
			stamps = append(stamps, now)
		}
	}
	elapsed := time.Since(start).Seconds()
	unit := float64(megabyte)
	if p.gbits {
		unit = roceGigabit
	}
	avg := float64(n) * float64(p.iters) / elapsed / unit
	// Peak: the best tenth of the run, counted in blocks of at least two
	// send-queue depths (completions arrive in bursts of up to one).
	peak := avg
	if k := max(p.iters/10, 2*p.txDepth); k < p.iters {
		prev := start
		for i := k - 1; i < len(stamps); i += k {
			if d := stamps[i].Sub(prev).Seconds(); d > 0 {
				peak = math.Max(peak, float64(n)*float64(k)/d/unit)
			}
			prev = stamps[i]
		}
	}
	return bwResult{peak, avg, float64(p.iters) / elapsed / 1e6}, nil
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

// rateLogHeader is the rate log's column line (after its comment lines).
const rateLogHeader = "unix_ns,bytes,rate_bps,cnps_received,rate_cuts,resent,timeouts,seq_naks"

// startRateLog samples the client's progress every p.rateEvery into
// p.rateLog, as CSV after two comment lines naming the flow: the wall
// clock (Unix ns, so that logs of flows on several hosts line up), the
// bytes of the WRs completed so far, the QP's DCQCN rate in bits/s (0
// without DCQCN) and its counters. stop takes a last sample and closes
// the file.
func (p *rocePerf) startRateLog(q *rdma.QP, me, peer rdma.ConnInfo) (stop func(), err error) {
	f, err := os.Create(p.rateLog)
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriter(f)
	fmt.Fprintf(w, "# goccl roce %s rate log: flow %s -> %s, every %v, dcqcn %v\n", p.name,
		rdma.GIDString(me.GID, me.Port), rdma.GIDString(peer.GID, peer.Port), p.rateEvery, p.dcqcn)
	fmt.Fprintf(w, "# %s\n", rateLogHeader)
	sample := func() {
		st, rate := q.CCStats()
		qs := q.Stats()
		fmt.Fprintf(w, "%d,%d,%.0f,%d,%d,%d,%d,%d\n", time.Now().UnixNano(), p.done.Load(), rate*8, st.CNPsReceived, st.RateCuts,
			qs.Retransmits, qs.Timeouts, qs.SeqNAKs)
	}
	sample()
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(p.rateEvery)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				sample()
			}
		}
	})
	return func() {
		close(quit)
		wg.Wait()
		sample()
		if err := w.Flush(); err != nil {
			fmt.Fprintf(p.err, "goccl roce %s: rate log: %v\n", p.name, err)
		}
		f.Close()
	}, nil
}
