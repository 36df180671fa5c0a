// Package config is the one home of goccl's GOCCL_* environment variables:
// each is declared here once, with its name, default, parser and a doc line,
// and read through that declaration by the library, the CLI (`goccl env`)
// and the doctor (`goccl doctor host`, which checks a job's environment
// against this list instead of keeping a copy).
//
// A variable set to the empty string (or only white space) counts as unset,
// as in NCCL. Values are parsed the same way everywhere:
//
//   - booleans: 1, true, on, yes and 0, false, off, no (any case);
//   - integers: decimal, within the variable's range;
//   - sizes: bytes with an optional binary suffix K, M, G or T (KiB, MiB,
//     GiB, TiB; a trailing B or iB is allowed: 4K = 4KB = 4KiB = 4096), see
//     ParseSize;
//   - durations: a Go duration (90s, 5m) or a number of seconds (90, 0.5);
//   - enums: one of the listed words (any case);
//   - lists: comma-separated listed words (any case), the whole list
//     inverted by a leading ^ (NCCL_DEBUG_SUBSYS syntax).
//
// Errors name the variable and the value and say what is accepted, for
// example `GOCCL_NSOCKS_PERPEER="0": want an integer in [1, 64]`.
package config

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Prefix starts every goccl variable's name; TestPrefix starts the names
// reserved for goccl's own tests (never read by the library).
const (
	Prefix     = "GOCCL_"
	TestPrefix = "GOCCL_TEST_"
)

// Kind is how a variable's value is parsed.
type Kind uint8

// The kinds of values.
const (
	String Kind = iota
	Bool
	Int
	Size
	Duration
	Enum
	List
)

func (k Kind) String() string {
	return [...]string{"string", "bool", "int", "size", "duration", "enum", "list"}[k]
}

// Var is one GOCCL_* environment variable.
type Var struct {
	Name    string
	Kind    Kind
	Default string // the value used when unset, as the user would write it ("" for none)
	Doc     string // one line: what it does
	Group   string // who sets it: "user" or "launcher" (goccl run and the launchers it mirrors set these)
	Min     int64  // Int: the smallest value accepted; Size: negative sizes are accepted when Min < 0
	Max     int64  // Int: the largest value accepted
	Words   []string
	// WarnOnly: a value Check refuses is warned about by its reader and
	// ignored (the default applies), not refused by CheckEnv.
	WarnOnly bool
}

var all []*Var

func define(v Var) *Var {
	if !strings.HasPrefix(v.Name, Prefix) {
		panic("config: " + v.Name + " lacks the " + Prefix + " prefix")
	}
	if v.Group == "" {
		v.Group = "user"
	}
	p := &v
	all = append(all, p)
	return p
}

// The variables, in the order `goccl env` lists them.
var (
	Debug = define(Var{Name: "GOCCL_DEBUG", Kind: Enum, Default: "WARN", Words: []string{"WARN", "INFO", "TRACE"}, WarnOnly: true,
		Doc: "log level (as NCCL_DEBUG): WARN prints warnings; INFO adds the transport per peer, the algorithm per op kind and Init timings; TRACE adds per-connection detail"})
	DebugSubsys = define(Var{Name: "GOCCL_DEBUG_SUBSYS", Kind: List, Default: "ALL", WarnOnly: true,
		Words: []string{"INIT", "BOOTSTRAP", "ENV", "NET", "SHM", "P2P", "COLL", "ALL"},
		Doc:   "subsystems whose INFO and TRACE lines are printed (as NCCL_DEBUG_SUBSYS): comma-separated INIT, BOOTSTRAP, ENV, NET, SHM, P2P, COLL or ALL; a leading ^ prints all but those; warnings are always printed"})
	DebugFile = define(Var{Name: "GOCCL_DEBUG_FILE", Kind: String,
		Doc: "file the log goes to instead of stderr (as NCCL_DEBUG_FILE): %h is replaced by the host name, %p by the process id; ignored when the program passes goccl.WithLogger"})
	DebugCheck = define(Var{Name: "GOCCL_DEBUG_CHECK", Kind: Bool, Default: "0",
		Doc: "exchange a fingerprint (op, count, type, root) before every collective so a mismatch is named before any data moves"})
	Timeout = define(Var{Name: "GOCCL_TIMEOUT", Kind: Duration, Default: "5m",
		Doc: "bound on Init and on every operation whose context has no deadline"})
	Algo = define(Var{Name: "GOCCL_ALGO", Kind: Enum, Words: []string{"ring", "rhd", "rd", "tree", "direct", "hier"},
		Doc: "force the AllReduce algorithm (default: the tuner chooses); hier also forces the hierarchical Broadcast, AllGather and ReduceScatter"})
	TunerProbe = define(Var{Name: "GOCCL_TUNER_PROBE", Kind: Bool, Default: "1",
		Doc: "across hosts, measure the network's and shared memory's latency and bandwidth at Init (1 MiB over the network: 10-20 ms at 1 Gbit/s) and choose between the flat and the hierarchical schedules by size from them; 0: a fixed 64 KiB (every rank must agree)"})
	DirectMinBytes = define(Var{Name: "GOCCL_DIRECT_MIN_BYTES", Kind: Int, Default: "16384", Min: 0, Max: math.MaxInt32,
		Doc: "per peer, the smallest buffer in bytes for the single-copy (direct read) schedules"})
	SocketIfname = define(Var{Name: "GOCCL_SOCKET_IFNAME", Kind: String,
		Doc: "network interface(s) for TCP links and the store, in NCCL_SOCKET_IFNAME syntax (eth0, ^docker, =eth1); a list or prefix that matches several up interfaces makes them rails: each peer's link is striped over rail i to the peer's rail i (the store and rail 0 use the first)"})
	SocketTimeout = define(Var{Name: "GOCCL_SOCKET_TIMEOUT", Kind: Duration, Default: "10s",
		Doc: "how long a TCP link to another host may go without an acknowledgement or keep-alive reply before it counts as lost (the peer's host or the path to it is gone: TCP_USER_TIMEOUT and keep-alive probes); 0: the kernel's defaults (many minutes)"})
	Net = define(Var{Name: "GOCCL_NET", Kind: Enum, Default: "socket", Words: []string{"socket", "roce"},
		Doc: "network transport between hosts (as NCCL_NET): socket (TCP) or roce (RC queue pairs of goccl's soft RoCE device, opened on the GOCCL_IB_HCA interface; a rank that cannot open it warns and its links stay on TCP); every rank should agree"})
	IBHCA = define(Var{Name: "GOCCL_IB_HCA", Kind: String,
		Doc: "with GOCCL_NET=roce, the interface(s) the soft RoCE devices open on, in NCCL_IB_HCA syntax (eth0, =eth0,eth1, ^docker; a :1 port suffix is accepted), one device per rail of GOCCL_SOCKET_IFNAME (rail i's device on the i-th match; more than the rails go unused); default: the rails' own interfaces"})
	IBGIDIndex = define(Var{Name: "GOCCL_IB_GID_INDEX", Kind: Int, Default: "-1", Min: -1, Max: 255,
		Doc: "with GOCCL_NET=roce, the GID index as in a Linux RoCE GID table (NCCL_IB_GID_INDEX): even (0, 2) selects RoCE v1 (raw Ethernet frames, link-local GID, root needed), odd or -1 RoCE v2 over UDP on the interface's IPv4 address"})
	IBTimeout = define(Var{Name: "GOCCL_IB_TIMEOUT", Kind: Int, Default: "16", Min: 1, Max: 31,
		Doc: "with GOCCL_NET=roce, the queue pairs' local ACK timeout exponent (4.096 µs × 2^N, as NCCL_IB_TIMEOUT; 16: 268 ms): the wait before resending a loss no later packet reveals; a queue pair fails after GOCCL_IB_RETRY_CNT timeouts in a row without progress (a dead peer is noticed sooner, by its control connection)"})
	IBRetryCnt = define(Var{Name: "GOCCL_IB_RETRY_CNT", Kind: Int, Default: "7", Min: 0, Max: 7,
		Doc: "with GOCCL_NET=roce, the queue pairs' retry count (as NCCL_IB_RETRY_CNT)"})
	IBTC = define(Var{Name: "GOCCL_IB_TC", Kind: Int, Default: "0", Min: 0, Max: 255,
		Doc: "with GOCCL_NET=roce, the traffic class of the RoCE v2 packets (as NCCL_IB_TC): the IPv4 TOS byte's DSCP bits (106, DSCP 26, is a common RoCE class; the low 2 bits, ECN's, are the device's)"})
	IBDCQCN = define(Var{Name: "GOCCL_IB_DCQCN", Kind: Int, Default: "0", Min: 0, Max: 1000000,
		Doc: "with GOCCL_NET=roce, RoCE v2 congestion control: DCQCN at this line rate in Mbit/s (ConnectX's default parameters, rdma/qp.DefaultDCQCN), packets sent ECN-capable and CNPs returned for CE marks; 0: off"})
	IBDCQCNParams = define(Var{Name: "GOCCL_IB_DCQCN_PARAMS", Kind: String,
		Doc: "with GOCCL_IB_DCQCN, DCQCN parameters other than ConnectX's defaults, by their mlx5 names and units (roce_rp/roce_np: rpg_time_reset, rpg_ai_rate, min_time_between_cnps, rate_reduce_monitor_period, dce_tcp_rtt, ...; times in µs or as 4ms), comma-separated name=value: a fabric slower than a NIC's microseconds needs its times scaled up"})
	IBQPsPerConnection = define(Var{Name: "GOCCL_IB_QPS_PER_CONNECTION", Kind: Int, Default: "1", Min: 1, Max: 64,
		Doc: "with GOCCL_NET=roce, queue pairs per connection (as NCCL_IB_QPS_PER_CONNECTION), each sending from a UDP source port of its own so that switches hashing the 5-tuple (ECMP) can spread a pair's traffic over their paths; messages of 1 MiB and more are split over them, smaller ones take them in turn. Above 1, links to a peer use neither registered buffers' zero-copy path nor symmetric-memory windows"})
	CollNetEnable = define(Var{Name: "GOCCL_COLLNET_ENABLE", Kind: Bool, Default: "0",
		Doc: "AllReduce by in-network aggregation (as NCCL_COLLNET_ENABLE): every rank attaches at Init to the aggregation tree whose root GOCCL_COLLNET_AGGD names (goccl aggd); if any rank cannot, all warn and stay on the links"})
	CollNetAggd = define(Var{Name: "GOCCL_COLLNET_AGGD", Kind: String,
		Doc: "with GOCCL_COLLNET_ENABLE=1, host:port of the root aggregation node (goccl aggd); read by rank 0, which publishes it in the store for the others"})
	NSocksPerPeer = define(Var{Name: "GOCCL_NSOCKS_PERPEER", Kind: Int, Default: "2", Min: 1, Max: 64,
		Doc: "TCP sockets per peer and direction; messages above 2 MiB are striped over them"})
	HostID = define(Var{Name: "GOCCL_HOSTID", Kind: String,
		Doc: "this rank's host identity (like NCCL_HOSTID): ranks with the same value share memory and count as one host; default: boot id, host name, /dev/shm device and network namespace"})
	XferStore = define(Var{Name: "GOCCL_XFER_STORE", Kind: String,
		Doc: "where xfer agents without Options.Store publish and fetch metadata (NIXL_ETCD_ENDPOINTS' role): etcd://host:2379[,host:2379]/prefix (the program imports github.com/goccl/goccl/rendezvous/etcd) or host:port of a goccl TCP store"})
	ShmDisable = define(Var{Name: "GOCCL_SHM_DISABLE", Kind: Bool, Default: "0",
		Doc: "use TCP between ranks on the same host instead of shared memory"})
	ShmDir = define(Var{Name: "GOCCL_SHM_DIR", Kind: String, Default: "/dev/shm",
		Doc: "directory of the shared-memory ring files"})
	ShmCMA = define(Var{Name: "GOCCL_SHM_CMA", Kind: Bool, Default: "1",
		Doc: "let shared-memory links move large messages by Cross Memory Attach (process_vm_readv) instead of through the ring"})
	ShmCMAThreshold = define(Var{Name: "GOCCL_SHM_CMA_THRESHOLD", Kind: Size, Min: -1,
		Doc: "smallest message in bytes moved by Cross Memory Attach (default: the ring's own; 0 or negative: never)"})
	TraceFile = define(Var{Name: "GOCCL_TRACE_FILE", Kind: String,
		Doc: "write every operation as Chrome trace-event JSON (Perfetto) to this file; %r: rank, %p: pid, %h: host (trace-%r.json)"})
	FlightRecorder = define(Var{Name: "GOCCL_FLIGHT_RECORDER", Kind: Int, Default: "0", Min: 0, Max: 1 << 20,
		Doc: "keep the last N operations and print them when an operation fails (0: off; 64 when GOCCL_TRACE_FILE or GOCCL_FLIGHT_RECORDER_DUMP is set)"})
	FlightRecorderDump = define(Var{Name: "GOCCL_FLIGHT_RECORDER_DUMP", Kind: String,
		Doc: "when an operation fails, write the flight recorder's operations to this file in PyTorch's flight-recorder JSON schema, for `goccl doctor flight-recorder` or PyTorch's fr_trace; %r: rank, %p: pid, %h: host (fr-%r.json); keeps 64 operations unless GOCCL_FLIGHT_RECORDER says otherwise"})
	ArrivalSkew = define(Var{Name: "GOCCL_ARRIVAL_SKEW", Kind: Bool, Default: "1",
		Doc: "record which rank entered each collective last and how late (Comm.Stragglers, the goccl_rank_arrival_lag_seconds series, the trace's last_rank and lag_us) at the cost of a clock reading per operation; 0: off (every rank should agree)"})
	MetricsAddr = define(Var{Name: "GOCCL_METRICS_ADDR", Kind: String,
		Doc: "serve the communicators' Prometheus metrics at http://ADDR/metrics, the port moved up by the local rank (:9400: local rank 1 on 9401)"})
	RASAddr = define(Var{Name: "GOCCL_RAS_ADDR", Kind: String,
		Doc: "host:port where rank 0 serves the job-wide health query in NCCL RAS's client protocol (goccl status; NCCL's own is NCCL_RAS_ADDR, default localhost:28028); every rank then answers status probes on a port of its own; unset: off"})
	TopoDumpFile = define(Var{Name: "GOCCL_TOPO_DUMP_FILE", Kind: String,
		Doc: "at Init, rank 0 writes the job's topology (every host with its ranks, CPUs, NUMA nodes, interfaces, RDMA devices, GPUs) to this file, as NCCL_TOPO_DUMP_FILE does: XML of NCCL's shape, one <system> per host, or JSON when the name ends in .json; %h is replaced by the host name, %p by the process id"})
	ProgressNice = define(Var{Name: "GOCCL_PROGRESS_NICE", Kind: Int, Default: "-10", Min: -20, Max: 19,
		Doc: "nice value of the thread that runs non-blocking operations, so that communication issued during compute proceeds as soon as peers answer (lowering it needs CAP_SYS_NICE; 0: the process's own)"})
	Checksum = define(Var{Name: "GOCCL_CHECKSUM", Kind: Bool, Default: "0",
		Doc: "CRC32C on every TCP chunk, checked on receipt (all ranks must agree)"})
	TLS = define(Var{Name: "GOCCL_TLS", Kind: Bool, Default: "0",
		Doc: "TLS on TCP links, keyed from the job token or GOCCL_TLS_CERT/KEY/CA (all ranks must agree)"})
	TLSCert = define(Var{Name: "GOCCL_TLS_CERT", Kind: String, Doc: "PEM certificate file for GOCCL_TLS=1"})
	TLSKey  = define(Var{Name: "GOCCL_TLS_KEY", Kind: String, Doc: "PEM private key file for GOCCL_TLS=1"})
	TLSCA   = define(Var{Name: "GOCCL_TLS_CA", Kind: String, Doc: "PEM CA file that signs every rank's certificate, for GOCCL_TLS=1"})

	Progress = define(Var{Name: "GOCCL_PROGRESS", Kind: Enum, Default: "auto", Words: []string{"0", "1", "auto"}, WarnOnly: true,
		Doc: "progress bars of long runs (goccl perf sweeps, the training examples) on stderr: auto draws them only when stderr is a terminal, 1 always, 0 never"})

	Rank = define(Var{Name: "GOCCL_RANK", Kind: Int, Min: 0, Max: math.MaxInt32, Group: "launcher",
		Doc: "this process's rank"})
	WorldSize = define(Var{Name: "GOCCL_WORLD_SIZE", Kind: Int, Min: 1, Max: math.MaxInt32, Group: "launcher",
		Doc: "the number of ranks"})
	LocalRank = define(Var{Name: "GOCCL_LOCAL_RANK", Kind: Int, Min: 0, Max: math.MaxInt32, Group: "launcher",
		Doc: "the rank among the ranks on this host"})
	LocalWorldSize = define(Var{Name: "GOCCL_LOCAL_WORLD_SIZE", Kind: Int, Min: 1, Max: math.MaxInt32, Group: "launcher",
		Doc: "the number of ranks on this host"})
	StoreAddr = define(Var{Name: "GOCCL_STORE_ADDR", Kind: String, Group: "launcher",
		Doc: "host:port of the rendezvous store (rank 0 serves it)"})
	Store = define(Var{Name: "GOCCL_STORE", Kind: String, Group: "launcher",
		Doc: "the rendezvous store as a URL, overriding the others: etcd://host:2379[,host:2379...]/prefix (every rank a client of etcd, keys under prefix/<job id>/; the program imports github.com/goccl/goccl/rendezvous/etcd, as the goccl command does), tcp://host:port (as GOCCL_STORE_ADDR) or file:///dir (as GOCCL_STORE_DIR)"})
	StoreServed = define(Var{Name: "GOCCL_STORE_SERVED", Kind: Enum, Default: "rank0", Words: []string{"rank0", "launcher"}, Group: "launcher",
		Doc: "who serves the store at GOCCL_STORE_ADDR: rank0 (rank 0's process) or launcher (goccl run --max-restarts serves it, so that it outlives any rank: every rank, rank 0 included, is a client)"})
	Join = define(Var{Name: "GOCCL_JOIN", Kind: Bool, Default: "0", Group: "launcher",
		Doc: "set to 1 by goccl run --max-restarts in a process that replaces a failed rank: the program calls goccl.Join, not goccl.Init (goccl.Joining reports it), and the running ranks Grow"})
	StoreDir = define(Var{Name: "GOCCL_STORE_DIR", Kind: String, Group: "launcher",
		Doc: "shared directory for a file store (multi-host jobs without a store address)"})
	JobID = define(Var{Name: "GOCCL_JOB_ID", Kind: String, Group: "launcher",
		Doc: "identifier common to all ranks of the job"})
	JobToken = define(Var{Name: "GOCCL_JOB_TOKEN", Kind: String, Group: "launcher",
		Doc: "the job's shared secret: the store and every TCP link prove it by HMAC challenge-response (goccl run makes one per job)"})
	ProgressFD = define(Var{Name: "GOCCL_PROGRESS_FD", Kind: Int, Min: 0, Max: math.MaxInt32, Group: "launcher", WarnOnly: true,
		Doc: "file descriptor on which this rank draws its progress bars instead of stderr (goccl run passes rank 0 its own terminal)"})

	RoceLossyBytes = define(Var{Name: "GOCCL_ROCE_LOSSY_BYTES", Kind: Size, Group: "test",
		Doc: "bytes moved by the soft RoCE lossy-link test (rdma package tests only)"})
)

// All returns every variable, in the order `goccl env` lists them.
func All() []*Var { return append([]*Var(nil), all...) }

// Names returns every variable's name, sorted.
func Names() []string {
	n := make([]string, len(all))
	for i, v := range all {
		n[i] = v.Name
	}
	sort.Strings(n)
	return n
}

// Find returns the variable called name, or nil.
func Find(name string) *Var {
	for _, v := range all {
		if v.Name == name {
			return v
		}
	}
	return nil
}

// Lookup returns the variable's value from the environment, trimmed; ok is
// false when it is unset or blank.
func (v *Var) Lookup() (string, bool) {
	s, ok := os.LookupEnv(v.Name)
	s = strings.TrimSpace(s)
	return s, ok && s != ""
}

// Source says where the variable's value comes from: "env" when set, else
// "default" when it has one, else "unset"; value is what applies.
func (v *Var) Source() (value, source string) {
	if s, ok := v.Lookup(); ok {
		return s, "env"
	}
	if v.Default != "" {
		return v.Default, "default"
	}
	return "", "unset"
}

// Get returns the variable's value, or its default when unset.
func (v *Var) Get() string {
	s, _ := v.Source()
	return s
}

// Check reports whether s is a valid value of v, with an error naming the
// variable, the value and what is accepted.
func (v *Var) Check(s string) error {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil
	}
	var err error
	switch v.Kind {
	case Bool:
		_, err = parseBool(s)
	case Int:
		_, err = v.parseInt(s)
	case Size:
		_, err = v.parseSize(s)
	case Duration:
		_, err = ParseDuration(s)
	case Enum:
		_, err = v.parseEnum(s)
	case List:
		_, _, err = v.parseList(s)
	}
	if err != nil {
		return fmt.Errorf("%s=%q: %w", v.Name, s, err)
	}
	return nil
}

// Bool returns the boolean value (the default when unset).
func (v *Var) Bool() (bool, error) {
	b, _, err := get(v, parseBool)
	return b, err
}

// Int returns the integer value (the default when unset); ok is false when
// neither is set.
func (v *Var) Int() (n int, ok bool, err error) {
	n64, ok, err := get(v, v.parseInt)
	return int(n64), ok, err
}

// Size returns the size in bytes (the default when unset); ok is false when
// neither is set.
func (v *Var) Size() (n int64, ok bool, err error) { return get(v, v.parseSize) }

// Duration returns the duration (the default when unset); ok is false when
// neither is set.
func (v *Var) Duration() (d time.Duration, ok bool, err error) { return get(v, ParseDuration) }

// get parses v's value (the default when unset) with parse; ok is false
// when neither is set. The error names the variable and the value.
func get[T any](v *Var, parse func(string) (T, error)) (T, bool, error) {
	var zero T
	s := v.Get()
	if s == "" {
		return zero, false, nil
	}
	x, err := parse(s)
	if err != nil {
		return zero, false, fmt.Errorf("%s=%q: %w", v.Name, s, err)
	}
	return x, true, nil
}

// Word returns an enum's value as its word in the declared spelling (the
// default when unset, "" when neither is set).
func (v *Var) Word() (string, error) {
	w, _, err := get(v, v.parseEnum)
	return w, err
}

// WordList returns a list's words in their declared spelling (the default
// when unset) and whether a leading ^ inverts it. Words it does not know
// are left out and named in the error (the others are still returned).
func (v *Var) WordList() (words []string, invert bool, err error) {
	words, invert, err = v.parseList(v.Get())
	if err != nil {
		err = fmt.Errorf("%s=%q: %w", v.Name, v.Get(), err)
	}
	return words, invert, err
}

func (v *Var) parseList(s string) (words []string, invert bool, err error) {
	s = strings.TrimSpace(s)
	if rest, ok := strings.CutPrefix(s, "^"); ok {
		s, invert = rest, true
	}
	var bad []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		w, err := v.parseEnum(f)
		if err != nil {
			bad = append(bad, f)
			continue
		}
		words = append(words, w)
	}
	if bad != nil {
		err = fmt.Errorf("unknown %s: want a comma-separated list of %s, with an optional leading ^", strings.Join(bad, ", "), orList(v.Words))
	}
	return words, invert, err
}

// CheckEnv checks every goccl variable set in the environment (but the
// WarnOnly ones) and returns the first bad one's error (Init calls it, so a
// typo in a value fails at once with the variable's name instead of deep
// inside a transport).
func CheckEnv() error {
	for _, v := range all {
		if s, ok := v.Lookup(); ok && !v.WarnOnly {
			if err := v.Check(s); err != nil {
				return err
			}
		}
	}
	return nil
}

func parseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "1", "true", "on", "yes":
		return true, nil
	case "0", "false", "off", "no":
		return false, nil
	}
	return false, fmt.Errorf("want 1, true, on, yes or 0, false, off, no")
}

func (v *Var) parseInt(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < v.Min || n > v.Max {
		if v.Max == math.MaxInt32 {
			return 0, fmt.Errorf("want an integer >= %d", v.Min)
		}
		return 0, fmt.Errorf("want an integer in [%d, %d]", v.Min, v.Max)
	}
	return n, nil
}

func (v *Var) parseSize(s string) (int64, error) {
	if v.Min < 0 && strings.HasPrefix(s, "-") {
		n, err := ParseSize(s[1:])
		return -n, err
	}
	return ParseSize(s)
}

func (v *Var) parseEnum(s string) (string, error) {
	for _, w := range v.Words {
		if strings.EqualFold(s, w) {
			return w, nil
		}
	}
	return "", fmt.Errorf("want %s", orList(v.Words))
}

func orList(w []string) string {
	if len(w) == 1 {
		return w[0]
	}
	return strings.Join(w[:len(w)-1], ", ") + " or " + w[len(w)-1]
}

// SizeSyntax is what ParseSize accepts, for messages.
const SizeSyntax = "a number of bytes with an optional K, M, G or T suffix (1024-based), e.g. 8, 128K, 1.5M, 4G"

// ParseSize reads a byte count: a non-negative number, fractions allowed
// (1.5M), with an optional binary suffix K, M, G or T followed by an
// optional B or iB ("8", "128K", "1.5MB", "8GiB"); nccl-tests' -b/-e syntax
// with T added. A bare "B" suffix means bytes. Values above 2^62 are refused.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.' || (i == 0 && t[i] == '+')) {
		i++
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || num == "" || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("invalid size %q: want %s", s, SizeSyntax)
	}
	mult := 1.0
	if unit != "" {
		shift := strings.IndexByte("KMGT", upper(unit[0]))
		rest := unit[1:]
		if shift < 0 {
			shift, rest = -1, unit
		}
		if rest != "" && rest != "B" && rest != "b" && rest != "iB" || (shift < 0 && rest == "iB") {
			return 0, fmt.Errorf("invalid size %q: want %s", s, SizeSyntax)
		}
		mult = float64(int64(1) << (10 * (shift + 1)))
	}
	v := f * mult
	if v > 1<<62 {
		return 0, fmt.Errorf("size %q too large (the limit is 4194304T)", s)
	}
	return int64(v), nil
}

func upper(c byte) byte {
	if c >= 'a' && c <= 'z' {
		return c - 'a' + 'A'
	}
	return c
}

// ParseDuration reads a Go duration ("90s", "5m") or a number of seconds
// ("90", "0.5"); negative values are refused.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if secs, err := strconv.ParseFloat(s, 64); err == nil {
		if secs < 0 || math.IsNaN(secs) || secs > float64(math.MaxInt64)/float64(time.Second) {
			return 0, fmt.Errorf("want a duration >= 0 (90s, 5m) or a number of seconds")
		}
		return time.Duration(secs * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("want a duration (90s, 5m) or a number of seconds")
	}
	return d, nil
}

// DebugInfo reports whether GOCCL_DEBUG asks for INFO output or more (INFO
// or TRACE); an unknown level counts as WARN, the default.
func DebugInfo() bool {
	w, _ := Debug.Word()
	return w == "INFO" || w == "TRACE"
}

// DebugTrace reports whether GOCCL_DEBUG is TRACE.
func DebugTrace() bool {
	w, _ := Debug.Word()
	return w == "TRACE"
}
