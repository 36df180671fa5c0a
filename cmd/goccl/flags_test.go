package main

import (
	"bytes"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/launch"
)

// testFlags is a flag set with a long flag that has a shorthand (-n,
// --np), a long one without (--metrics-addr), a boolean shorthand (-v,
// --verbose) and a string shorthand (-o, --output).
func testFlags() *cliFlags {
	fs := newFlags("goccl test", io.Discard, nil)
	fs.IntP("np", "n", 0, "")
	fs.String("metrics-addr", "", "")
	fs.BoolP("verbose", "v", false, "")
	fs.StringP("output", "o", "", "")
	return fs
}

// TestFlagRewrite: a single-dash word that is a long flag name gains a
// dash; flag values, shorthand groups, positional arguments and everything
// after "--" (or after the first positional argument when flags are not
// interspersed) are left as they are.
func TestFlagRewrite(t *testing.T) {
	for _, tc := range []struct {
		args, want   []string
		interspersed bool
	}{
		{[]string{"-np", "4", "-metrics-addr=:9400", "prog"}, []string{"--np", "4", "--metrics-addr=:9400", "prog"}, true},
		{[]string{"-n4", "-n", "4", "-n=4", "--np=4", "-vn4"}, []string{"-n4", "-n", "4", "-n=4", "--np=4", "-vn4"}, true},
		// A value that looks like a flag stays a value.
		{[]string{"-o", "-np", "--output", "-verbose", "-metrics-addr", "-np"}, []string{"-o", "-np", "--output", "-verbose", "--metrics-addr", "-np"}, true},
		{[]string{"-v", "-np", "2"}, []string{"-v", "--np", "2"}, true},
		// "--" ends the flags; a positional argument does when not interspersed.
		{[]string{"a", "-np", "2", "--", "-np", "3"}, []string{"a", "--np", "2", "--", "-np", "3"}, true},
		{[]string{"-np", "2", "prog", "-np", "3", "-verbose"}, []string{"--np", "2", "prog", "-np", "3", "-verbose"}, false},
		{[]string{"-help"}, []string{"--help"}, true},
		// Unknown words are left to pflag (and explain).
		{[]string{"-npp", "2", "-x"}, []string{"-npp", "2", "-x"}, true},
	} {
		fs := testFlags()
		fs.SetInterspersed(tc.interspersed)
		got, err := fs.rewrite(tc.args)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q (interspersed %v): %q, %v; want %q", tc.args, tc.interspersed, got, err, tc.want)
		}
	}
}

// TestFlagForms: GNU forms and the single-dash long forms set the same
// values.
func TestFlagForms(t *testing.T) {
	for _, args := range [][]string{
		{"--np=4", "--metrics-addr=:9400", "--verbose", "--output=x"},
		{"--np", "4", "--metrics-addr", ":9400", "--verbose=true", "--output", "x"},
		{"-n4", "-metrics-addr", ":9400", "-v", "-ox"},
		{"-n", "4", "-metrics-addr=:9400", "-vo", "x"},
		{"-n=4", "-verbose", "-o=x", "-metrics-addr", ":9400"},
		{"-np", "4", "-metrics-addr=:9400", "-verbose", "-output", "x"},
		{"-vn4", "-output=x", "--metrics-addr=:9400"},
		{"pos", "-np=4", "-metrics-addr", ":9400", "-verbose=true", "-output", "x"},
	} {
		fs := testFlags()
		if err := fs.parse(args); err != nil {
			t.Errorf("%q: %v", args, err)
			continue
		}
		np, _ := fs.GetInt("np")
		addr, _ := fs.GetString("metrics-addr")
		v, _ := fs.GetBool("verbose")
		out, _ := fs.GetString("output")
		if np != 4 || addr != ":9400" || !v || out != "x" {
			t.Errorf("%q: np %d metrics-addr %q verbose %v output %q", args, np, addr, v, out)
		}
	}
}

// TestFlagErrors: unknown flags are named as typed with the nearest flag,
// in the dashes typed; bad values name the flag as typed.
func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--npp", "2"}, `unknown flag "--npp"; did you mean "--np"?`},
		{[]string{"-npp", "2"}, `unknown flag "-npp"; did you mean "-np"?`}, // -n with "pp"
		{[]string{"-npp=2"}, `unknown flag "-npp"; did you mean "-np"?`},    // -n with "pp=2"
		{[]string{"--metric-addr=x"}, `unknown flag "--metric-addr"; did you mean "--metrics-addr"?`},
		{[]string{"-metric-addr", "x"}, `unknown flag "-metric-addr"; did you mean "-metrics-addr"?`},
		{[]string{"-N", "2"}, `unknown flag "-N"; did you mean "-n"?`},
		{[]string{"--N", "2"}, `unknown flag "--N"; did you mean "-n"?`}, // -n has no long name n
		{[]string{"-V"}, `unknown flag "-V"; did you mean "-v"?`},
		{[]string{"-vX"}, `unknown flag "-X" in "-vX"`},
		{[]string{"-x"}, `unknown flag "-x"`},
		{[]string{"--bogus"}, `unknown flag "--bogus"`},
		{[]string{"--hepl"}, `unknown flag "--hepl"; did you mean "--help"?`},
		// A long word that a string shorthand would swallow.
		{[]string{"-outptu", "x"}, `unknown flag "-outptu"; did you mean "-output"? (-o with the value "utptu" is -o utptu)`},
		{[]string{"-n", "x"}, `invalid value "x" for flag -n: must be an integer`},
		{[]string{"--np=x"}, `invalid value "x" for flag --np: must be an integer`},
		{[]string{"-np", "x"}, `invalid value "x" for flag -np: must be an integer`},
		{[]string{"-nzzzz"}, `invalid value "zzzz" for flag -n in "-nzzzz": must be an integer`},
		{[]string{"-n"}, `flag needs an argument: -n`},
		{[]string{"--np"}, `flag needs an argument: --np`},
		{[]string{"-np"}, `flag needs an argument: -np`},
	} {
		fs := testFlags()
		err := fs.parse(tc.args)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q: %v, want %s", tc.args, err, tc.want)
		}
	}
	// Help: -h, --help and -help print the usage to the output and exit 0.
	for _, h := range []string{"-h", "--help", "-help"} {
		var out bytes.Buffer
		fs := newFlags("goccl test", &out, nil)
		fs.String("metrics-addr", "", "serve metrics")
		if status, exit := fs.parseOrExit([]string{"a", h}); status != 0 || !exit || !strings.Contains(out.String(), "usage: goccl test [flags]") || !strings.Contains(out.String(), "--metrics-addr") {
			t.Errorf("%s: status %d exit %v, output %q", h, status, exit, out.String())
		}
	}
	var out bytes.Buffer
	fs := newFlags("goccl test", &out, nil)
	if status, exit := fs.parseOrExit([]string{"--nope"}); status != 2 || !exit || out.String() != "goccl test: unknown flag \"--nope\"\nRun 'goccl test -h' for usage.\n" {
		t.Errorf("--nope: status %d exit %v, output %q", status, exit, out.String())
	}
}

// TestGNUForms: the GNU forms on the real commands, beside the single-dash
// forms of before.
func TestGNUForms(t *testing.T) {
	for _, args := range [][]string{
		{"--minbytes=16"}, {"--minbytes", "16"}, {"-b16"}, {"-b", "16"}, {"-b=16"},
		{"-minbytes", "16"}, {"-minbytes=16"}, {"--minbytes", "16", "-b", "16"},
	} {
		cfg, err := parsePerfArgs(append([]string{"all_reduce"}, args...), io.Discard)
		if err != nil || cfg.minBytes != 16 {
			t.Errorf("perf %q: %v", args, err)
		}
	}
	// A grouped attached value and flags before COLL.
	cfg, err := parsePerfArgs([]string{"-e1M", "-dall", "--op=all", "-r-1", "reduce", "-n", "3", "--warmup_iters=0"}, io.Discard)
	if err != nil || cfg.maxBytes != 1<<20 || cfg.dtype != "all" || cfg.op != "all" || cfg.root != -1 || cfg.coll.name != "reduce" || cfg.iters != 3 || cfg.warmup != 0 {
		t.Errorf("perf: %+v, %v", cfg, err)
	}

	for _, tc := range []struct {
		args []string
		want runArgs
	}{
		{[]string{"--nproc-per-node=2", "prog"}, runArgs{np: 2, npSet: true, prog: "prog"}},
		{[]string{"-np", "2", "prog", "a"}, runArgs{np: 2, npSet: true, prog: "prog", args: []string{"a"}}},
		{[]string{"-n2", "prog"}, runArgs{np: 2, npSet: true, prog: "prog"}},
		{[]string{"--n=2", "prog"}, runArgs{np: 2, npSet: true, prog: "prog"}},
		{[]string{"-np=2", "--nproc_per_node", "2", "prog"}, runArgs{np: 2, npSet: true, prog: "prog"}},
		// Nothing after PROG is goccl run's, flags or "--".
		{[]string{"-np", "2", "prog", "-np", "3", "--env", "X=1", "--", "-n4"}, runArgs{np: 2, npSet: true, prog: "prog", args: []string{"-np", "3", "--env", "X=1", "--", "-n4"}}},
		{[]string{"-n", "3", "--", "-prog", "-np", "4"}, runArgs{np: 3, npSet: true, prog: "-prog", args: []string{"-np", "4"}}},
		{[]string{"--env=A=1", "--env", "B=2", "-env", "C=3", "-env=D=4", "--grace=2s", "-metrics-addr", ":9400", "prog"},
			runArgs{np: 1, env: envList{config.MetricsAddr.Name + "=:9400", "A=1", "B=2", "C=3", "D=4"}, grace: 2 * time.Second, prog: "prog"}},
		{[]string{"--settle", "10s", "-n", "2", "prog"}, runArgs{np: 2, npSet: true, settle: 10 * time.Second, prog: "prog"}},
	} {
		got, status := parseRunArgs(tc.args, io.Discard)
		if got == nil {
			t.Errorf("run %q: status %d", tc.args, status)
			continue
		}
		if tc.want.grace == 0 {
			tc.want.grace = got.grace
		}
		if tc.want.settle == 0 {
			tc.want.settle = launch.DefaultSettle
		}
		if tc.want.args == nil {
			tc.want.args = []string{}
		}
		if !reflect.DeepEqual(*got, tc.want) {
			t.Errorf("run %q: %+v, want %+v", tc.args, *got, tc.want)
		}
	}
}

// TestHelpFlags: -h, --help and -help print each command's usage and exit 0.
func TestHelpFlags(t *testing.T) {
	for _, cmd := range [][]string{
		{"run"}, {"perf"}, {"perf", "all_reduce"}, {"env"}, {"plot"}, {"trace", "merge"},
		{"doctor", "host"}, {"doctor", "nccl-tests"}, {"roce", "write-bw"}, {"roce", "read-lat", "10.0.0.1"},
	} {
		for _, h := range []string{"-h", "--help", "-help"} {
			var o, e bytes.Buffer
			code := cli(append(cmd[:len(cmd):len(cmd)], h), &o, &e)
			if code != 0 || !strings.Contains(o.String()+e.String(), "usage: goccl "+cmd[0]) {
				t.Errorf("%q %s: exit %d\nstdout %q\nstderr %q", cmd, h, code, o.String(), e.String())
			}
		}
	}
}

// TestUnknownFlagSuggestions: every command names an unknown flag as typed
// and suggests the nearest.
func TestUnknownFlagSuggestions(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"perf", "all_reduce", "--minbyte", "8"}, `goccl perf: unknown flag "--minbyte"; did you mean "--minbytes"?`},
		{[]string{"perf", "all_reduce", "--minbyte=8"}, `goccl perf: unknown flag "--minbyte"; did you mean "--minbytes"?`},
		{[]string{"perf", "all_reduce", "-minbyte", "8"}, `goccl perf: unknown flag "-minbyte"; did you mean "-minbytes"?`},
		{[]string{"perf", "all_reduce", "-datatyp", "half"}, `unknown flag "-datatyp"; did you mean "-datatype"? (-d with the value "atatyp" is -d atatyp)`},
		{[]string{"perf", "all_reduce", "--blockin=1"}, `unknown flag "--blockin"; did you mean "--blocking"?`},
		{[]string{"perf", "all_reduce", "-Z", "1"}, `unknown flag "-Z"; did you mean "-z"?`},
		{[]string{"perf", "all_reduce", "-npp", "2"}, `unknown flag "-npp"; did you mean "-np"?`},
		{[]string{"run", "-nproc_per_nod", "2", "true"}, `goccl run: unknown flag "-nproc_per_nod"; did you mean "-nproc_per_node"?`},
		{[]string{"run", "--metrics-adr", ":1", "true"}, `unknown flag "--metrics-adr"; did you mean "--metrics-addr"?`},
		{[]string{"env", "--jsn"}, `goccl env: unknown flag "--jsn"; did you mean "--json"?`},
		{[]string{"doctor", "host", "-jsno"}, `goccl doctor host: unknown flag "-jsno"; did you mean "-json"?`},
		{[]string{"doctor", "nccl-tests", "f", "--expect-busb", "1"}, `unknown flag "--expect-busb"; did you mean "--expect-busbw"?`},
		{[]string{"plot", "--titel", "T", "f"}, `goccl plot: unknown flag "--titel"; did you mean "--title"?`},
		{[]string{"trace", "merge", "--ouptut", "x", "f"}, `goccl trace merge: unknown flag "--ouptut"; did you mean "--output"?`},
	} {
		var o, e bytes.Buffer
		if code := cli(tc.args, &o, &e); code != 2 || !strings.Contains(e.String(), tc.want+"\n") {
			t.Errorf("%q: exit %d, stderr %q, want it to contain %q", tc.args, code, e.String(), tc.want)
		}
	}
}

// TestScriptFlagSpellings: the command lines of scripts/ and docs/cli.md
// parse as before (the roce ones: TestRocePerfArgs).
func TestScriptFlagSpellings(t *testing.T) {
	// scripts/bench-secure.sh
	cfg, err := parsePerfArgs(strings.Fields("all_reduce -np 2 -a 3 -z 2 -b 8 -e 128M -f 8 -n 20 -w 5 -c 0"), io.Discard)
	if err != nil || cfg.np != 2 || cfg.average != 3 || cfg.blocking != 2 || cfg.minBytes != 8 || cfg.maxBytes != 128<<20 ||
		cfg.stepFactor != 8 || cfg.iters != 20 || cfg.warmup != 5 || cfg.check != 0 {
		t.Errorf("bench-secure.sh: %+v, %v", cfg, err)
	}
	// scripts/compare-peers.sh
	cfg, err = parsePerfArgs(strings.Fields("broadcast -np 2 -b 8 -e 4M -f 2 -n 50 -w 10 -a 3 -z 2 -c 1"), io.Discard)
	if err != nil || cfg.coll.name != "broadcast" || cfg.maxBytes != 4<<20 || cfg.iters != 50 || cfg.check != 1 {
		t.Errorf("compare-peers.sh: %+v, %v", cfg, err)
	}
	// docs/cli.md
	for _, line := range []string{
		"all_reduce -np 2 -b 8 -e 128M -f 4", "all_gather -np 3 -d all -c 1", "all_reduce -np 2 -e 64M -plot busbw.png",
		"all_reduce -np 2 -b 8 -e 64K -f 8 -n 2 -w 1 -json x.json",
	} {
		if _, err := parsePerfArgs(strings.Fields(line), io.Discard); err != nil {
			t.Errorf("goccl perf %s: %v", line, err)
		}
	}
	// scripts/ddp-vs-torch.sh and ddp-labs.sh: the program's flags are its own.
	ra, _ := parseRunArgs(strings.Fields("-np 2 /tmp/ddp-mnist -steps 100 -batch 64 -overlap=true"), io.Discard)
	if ra == nil || ra.np != 2 || ra.prog != "/tmp/ddp-mnist" || strings.Join(ra.args, " ") != "-steps 100 -batch 64 -overlap=true" {
		t.Errorf("ddp-vs-torch.sh: %+v", ra)
	}
}
