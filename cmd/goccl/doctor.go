package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"

	"github.com/spf13/pflag"

	"github.com/goccl/goccl/doctor"
	"github.com/goccl/goccl/doctor/flightrec"
	"github.com/goccl/goccl/doctor/host"
	"github.com/goccl/goccl/doctor/ibv"
	k8sdoc "github.com/goccl/goccl/doctor/k8s"
	"github.com/goccl/goccl/doctor/nccllog"
	"github.com/goccl/goccl/doctor/nccltests"
	topodoc "github.com/goccl/goccl/doctor/topo"
	tracedoc "github.com/goccl/goccl/doctor/trace"
	"github.com/goccl/goccl/internal/config"
)

var doctorUsage = `usage: goccl doctor host [--json]
       goccl doctor nccl-log FILE|- [--json]
       goccl doctor nccl-tests FILE|- [--expect-busbw GBPS] [--json]
       goccl doctor topo FILE|- [--json]
       goccl doctor ibv FILE|- [--json]
       goccl doctor flight-recorder DUMP|DIR... [--json]
       goccl doctor k8s FILE|DIR... [--json]
       goccl doctor trace TRACE|DIR... [--skip N] [--per-step] [--json]

host        checks this machine: RDMA devices and /dev/infiniband (containers),
            port states, RoCE GIDs and the NCCL_IB_GID_INDEX to use, interface
            MTUs, /dev/shm size, the local port range, NUMA nodes, NCCL_* and
            ` + config.Prefix + `* variables, and runs nvidia-smi topo -m and ibv_devinfo when
            installed (their output is kept in --json's "tools")
nccl-log    reads an NCCL_DEBUG=INFO log
nccl-tests  reads an nccl-tests or goccl perf table; --expect-busbw flags
            sizes whose bus bandwidth (GB/s) falls short
topo        reads the matrix of nvidia-smi topo -m
ibv         reads ibv_devinfo, ibstat, ibstatus or show_gids output
flight-recorder
            reads every rank's flight-recorder dump (goccl's JSON from
            ` + config.FlightRecorderDump.Name + `, PyTorch's pickle or JSON; a folder
            is read whole), matches the operations across ranks by process
            group and sequence number, and names the culprit rank of a hang
            or mismatch (missing rank, type, size, dtype, state)
k8s         reads kubectl get pod -o json|yaml, manifests (a Deployment's
            or a job's pod template too) and kubectl describe pod output,
            whole or in pieces: RDMA, SR-IOV and GPU resources and pods the
            scheduler cannot place, IPC_LOCK, /dev/shm and /dev/infiniband
            mounts, hugepages, Multus networks asked for and attached, CNI
            failures, NCCL_* variables that turn fast paths off
trace       reads PyTorch profiler (Kineto) traces, one per rank, JSON or
            gzipped, or goccl's (` + config.TraceFile.Name + `; a folder is read
            whole): each rank's GPU time as idle, compute and non-compute,
            and the share of communication that overlaps computation, as
            Holistic Trace Analysis defines them; per step (ProfilerStep#N,
            ddp's steps) the communication, its overlap and exposed tail,
            host synchronizations (.item(), synchronize, D2H cudaMemcpy) and
            data-loader time, means over the steps after --skip; the
            last rank to reach each collective (stragglers)

FILE is read as posted (launcher prefixes and colour codes are fine); - is
standard input. Flags may come before or after FILE, with two dashes or
one (--json, -json). --json prints the report as JSON. Each finding has a
severity (error, warn, info), a stable code and a fix.

The exit status is 1 when a finding is an error, 0 otherwise, 2 for usage
errors and unreadable input.
`

func init() {
	register(&command{
		name:    "doctor",
		summary: "diagnose a setup: this host, NCCL logs, nccl-tests tables, nvidia-smi topo -m, ibv_devinfo, flight-recorder dumps, Kubernetes pods, profiler traces",
		usage:   "goccl doctor host|nccl-log|nccl-tests|topo|ibv|flight-recorder|k8s|trace [FILE|-] [--json]",
		run:     runDoctor,
	})
}

// doctorResult is what a doctor subcommand produced: the report to encode
// with --json, how to print it as text, and its findings (for the exit
// status).
type doctorResult struct {
	report   any
	text     func(io.Writer) error
	findings []doctor.Finding
}

// doctorRunFunc runs a subcommand on its opened input (nil for those
// without FILE|-).
type doctorRunFunc func(ctx context.Context, in io.Reader) (doctorResult, error)

// doctorSub is one row of the doctor table.
type doctorSub struct {
	name  string
	input bool // takes FILE|-
	// setup registers the subcommand's own flags (besides --json) on fs and
	// returns the function that runs it with their parsed values.
	setup func(fs *pflag.FlagSet) doctorRunFunc
	// files, instead of setup, makes a subcommand that takes one or more
	// FILE arguments (files or folders) and reads them itself.
	files func(fs *pflag.FlagSet) doctorFilesFunc
}

// doctorFilesFunc runs a subcommand of doctorSub.files on its paths.
type doctorFilesFunc func(ctx context.Context, paths []string) (doctorResult, error)

// doctorSubs lists the doctor subcommands; a new reader is one more row.
var doctorSubs = []doctorSub{
	{name: "host", setup: func(fs *pflag.FlagSet) doctorRunFunc {
		return func(ctx context.Context, _ io.Reader) (doctorResult, error) {
			rep, err := host.Run(ctx, host.Options{})
			if err != nil {
				return doctorResult{}, err
			}
			return doctorResult{report: rep, text: rep.WriteText, findings: rep.Findings}, nil
		}
	}},
	{name: "nccl-log", input: true, setup: func(fs *pflag.FlagSet) doctorRunFunc {
		return func(_ context.Context, in io.Reader) (doctorResult, error) {
			rep, err := nccllog.Analyze(in)
			if err != nil {
				return doctorResult{}, err
			}
			return doctorResult{report: rep, text: rep.WriteText, findings: rep.Findings}, nil
		}
	}},
	{name: "nccl-tests", input: true, setup: func(fs *pflag.FlagSet) doctorRunFunc {
		expect := fs.Float64("expect-busbw", 0, "expected bus bandwidth in GB/s (1e9 B/s): sizes of 64 MiB and up below 80% of it are flagged")
		return func(_ context.Context, in io.Reader) (doctorResult, error) {
			if *expect < 0 {
				return doctorResult{}, doctorUsageError{fmt.Errorf("--expect-busbw %v: must be a positive bandwidth in GB/s", *expect)}
			}
			rep, err := nccltests.Read(in, nccltests.Options{ExpectBusBW: *expect})
			if err != nil {
				return doctorResult{}, err
			}
			return doctorResult{report: rep, text: rep.WriteText, findings: rep.Findings}, nil
		}
	}},
	{name: "topo", input: true, setup: func(fs *pflag.FlagSet) doctorRunFunc {
		return func(_ context.Context, in io.Reader) (doctorResult, error) {
			rep, err := topodoc.Parse(in)
			if err != nil {
				return doctorResult{}, err
			}
			return doctorResult{report: rep, text: rep.WriteText, findings: rep.Findings}, nil
		}
	}},
	{name: "ibv", input: true, setup: func(fs *pflag.FlagSet) doctorRunFunc {
		return func(_ context.Context, in io.Reader) (doctorResult, error) {
			rep, err := ibv.Parse(in)
			if err != nil {
				return doctorResult{}, err
			}
			return doctorResult{report: rep, text: rep.WriteText, findings: rep.Findings}, nil
		}
	}},
	{name: "flight-recorder", files: func(fs *pflag.FlagSet) doctorFilesFunc {
		return func(_ context.Context, paths []string) (doctorResult, error) {
			dumps, err := flightrec.ReadPaths(paths)
			if err != nil {
				return doctorResult{}, doctorUsageError{err}
			}
			rep := flightrec.Analyze(dumps)
			return doctorResult{report: rep, text: rep.WriteText, findings: rep.Findings}, nil
		}
	}},
	{name: "k8s", files: func(fs *pflag.FlagSet) doctorFilesFunc {
		return func(_ context.Context, paths []string) (doctorResult, error) {
			rep, err := k8sdoc.ReadPaths(paths)
			if err != nil {
				return doctorResult{}, doctorUsageError{err}
			}
			return doctorResult{report: rep, text: rep.WriteText, findings: rep.Findings}, nil
		}
	}},
	{name: "trace", files: func(fs *pflag.FlagSet) doctorFilesFunc {
		skip := fs.Int("skip", 0, "warm-up steps of each rank that the step summary leaves out")
		perStep := fs.Bool("per-step", false, "print every step's figures")
		return func(_ context.Context, paths []string) (doctorResult, error) {
			if *skip < 0 {
				return doctorResult{}, doctorUsageError{fmt.Errorf("--skip %d: must be a number of steps ≥ 0", *skip)}
			}
			rks, err := tracedoc.ReadPaths(paths)
			if err != nil {
				return doctorResult{}, doctorUsageError{err}
			}
			rep := tracedoc.Analyze(rks, tracedoc.Options{Skip: *skip, PerStep: *perStep})
			return doctorResult{report: rep, text: rep.WriteText, findings: rep.Findings}, nil
		}
	}},
}

// doctorUsageError is a subcommand's complaint about its flags: exit 2.
type doctorUsageError struct{ error }

// doctorInput wraps the input and keeps the first read error other than
// io.EOF: the readers fail only when reading fails, which exits 2 like a
// file that cannot be opened.
type doctorInput struct {
	r   io.Reader
	err error
}

func (d *doctorInput) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	if err != nil && err != io.EOF && d.err == nil {
		d.err = err
	}
	return n, err
}

// doctorStdin is what FILE "-" reads; tests replace it.
var doctorStdin io.Reader = os.Stdin

// doctorReadInput opens a FILE|- argument: "-" is stdin (closing it does
// nothing), anything else a file path.
func doctorReadInput(arg string, stdin io.Reader) (io.ReadCloser, error) {
	if arg == "-" {
		if stdin == nil {
			return nil, errors.New("no standard input")
		}
		return io.NopCloser(stdin), nil
	}
	if arg == "" {
		return nil, errors.New("empty file name")
	}
	return os.Open(arg)
}

func runDoctor(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, doctorUsage)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, doctorUsage)
		return 0
	}
	var sub *doctorSub
	for i := range doctorSubs {
		if doctorSubs[i].name == args[0] {
			sub = &doctorSubs[i]
		}
	}
	if sub == nil {
		known := make([]string, 0, len(doctorSubs))
		for _, s := range doctorSubs {
			known = append(known, s.name)
		}
		sort.Strings(known)
		fmt.Fprintf(stderr, "goccl doctor: unknown subcommand %q (this build has: %s)\n\n%s", args[0], strings.Join(known, ", "), doctorUsage)
		return 2
	}
	name := "goccl doctor " + sub.name
	fs := newFlags(name, stderr, func(fs *cliFlags) {
		synopsis := name
		if sub.input {
			synopsis += " FILE|-"
		}
		fmt.Fprintf(fs.Output(), "usage: %s [flags]\n\nflags (before or after FILE):\n", synopsis)
		fs.PrintDefaults()
	})
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if sub.files != nil {
		runFiles := sub.files(fs.FlagSet)
		if status, exit := fs.parseOrExit(args[1:]); exit {
			return status
		}
		if len(fs.Args()) == 0 {
			fmt.Fprintf(stderr, "%s: need one or more FILE (or folder) arguments\n", name)
			fs.Usage()
			return 2
		}
		res, err := runFiles(context.Background(), fs.Args())
		return doctorOutput(name, res, err, *asJSON, stdout, stderr)
	}
	run := sub.setup(fs.FlagSet)
	if status, exit := fs.parseOrExit(args[1:]); exit {
		return status
	}
	pos := fs.Args() // FILE|-, before or after the flags; after "--" all
	want := 0
	if sub.input {
		want = 1
	}
	if len(pos) != want {
		if want == 0 {
			fmt.Fprintf(stderr, "%s: unexpected argument %q\n", name, pos[0])
		} else {
			fmt.Fprintf(stderr, "%s: need one FILE (or - for standard input), got %d arguments\n", name, len(pos))
		}
		fs.Usage()
		return 2
	}
	var in io.Reader
	var input *doctorInput
	if sub.input {
		rc, err := doctorReadInput(pos[0], doctorStdin)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return 2
		}
		defer rc.Close()
		input = &doctorInput{r: rc}
		in = input
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := run(ctx, in)
	if err != nil && input != nil && input.err != nil {
		fmt.Fprintf(stderr, "%s: reading %s: %v\n", name, pos[0], input.err)
		return 2
	}
	return doctorOutput(name, res, err, *asJSON, stdout, stderr)
}

// doctorOutput prints a subcommand's report (or its error) and returns the
// exit status.
func doctorOutput(name string, res doctorResult, err error, asJSON bool, stdout, stderr io.Writer) int {
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		var ue doctorUsageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(res.report)
	} else {
		err = res.text(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: writing the report: %v\n", name, err)
		return 1
	}
	if doctor.HasErrors(res.findings) {
		return 1
	}
	return 0
}
