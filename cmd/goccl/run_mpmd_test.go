package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/launch"
)

// pidSleepHelper, set to a directory, makes the test binary pidSleep (see
// TestMain).
const pidSleepHelper = "CLI_TEST_PID_SLEEP"

// pidSleep writes the process's pid to dir/pidRANK, then sleeps until
// it is stopped.
func pidSleep(dir string) int {
	file := filepath.Join(dir, "pid"+os.Getenv(config.Rank.Name))
	os.WriteFile(file+".tmp", []byte(strconv.Itoa(os.Getpid())), 0o600)
	os.Rename(file+".tmp", file)
	time.Sleep(30 * time.Second)
	return 0
}

// TestParseRunArgsMPMD: ":" separates the contexts, each with its own
// number of ranks, --env settings, PROG and ARGS ("--" and flags after
// PROG included); --metrics-addr's variable comes first in every
// context's environment.
func TestParseRunArgsMPMD(t *testing.T) {
	metrics := config.MetricsAddr.Name + "=:9400"
	args := []string{"--grace=2s", "-metrics-addr", ":9400", "-n", "1", "--env", "A=1", "prog1", "a", "--env", "X=1",
		":", "-np", "2", "-env=B=2", "--", "-prog2", "-n", "3",
		":", "--nproc-per-node=3", "prog1"}
	got, status := parseRunArgs(args, io.Discard)
	if got == nil {
		t.Fatalf("status %d", status)
	}
	want := runArgs{np: 1, npSet: true, env: envList{metrics, "A=1"}, grace: 2 * time.Second, settle: launch.DefaultSettle, prog: "prog1", args: []string{"a", "--env", "X=1"},
		more: []runApp{
			{np: 2, env: envList{metrics, "B=2"}, prog: "-prog2", args: []string{"-n", "3"}},
			{np: 3, env: envList{metrics}, prog: "prog1", args: []string{}},
		}}
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("got %+v\nwant %+v", *got, want)
	}
	if apps := got.apps(); len(apps) != 3 || apps[0].prog != "prog1" || apps[0].np != 1 || apps[2].np != 3 {
		t.Errorf("apps %+v", apps)
	}

	// Without --metrics-addr or --env the environments stay empty, and a
	// context's settings do not leak into the next.
	got, _ = parseRunArgs(strings.Fields("-n 2 --env A=1 p : -n 1 q"), io.Discard)
	if got == nil || !reflect.DeepEqual(got.env, envList{"A=1"}) || len(got.more) != 1 || got.more[0].env != nil {
		t.Errorf("got %+v", got)
	}

	// -h in a later context prints the help.
	var e bytes.Buffer
	if got, status := parseRunArgs(strings.Fields("-n 1 p : -n 1 -h"), &e); got != nil || status != 0 || !strings.Contains(e.String(), "usage: goccl run") {
		t.Errorf("-h in context 2: %+v, status %d, %q", got, status, e.String())
	}
}

// TestRunMPMDErrors: a bad context is named by its index (from 1) and
// what it lacks, and nothing runs.
func TestRunMPMDErrors(t *testing.T) {
	for _, tc := range []struct {
		args string
		want string
	}{
		{"-n 1 echo ran :", `goccl run: context 2 is empty: nothing follows the last ":"`},
		{"-n 1 echo ran : -n 1 echo ran :", `goccl run: context 3 is empty: nothing follows the last ":"`},
		{": -n 1 echo ran", `goccl run: context 1 is empty: nothing comes before the first ":"`},
		{"-n 1 echo ran : : -n 1 echo ran", `goccl run: context 2 is empty: nothing between two ":"`},
		{"-n 1 echo ran : -n 2", "goccl run: context 2: no program given: each context is -n N [--env KEY=VALUE]... PROG [ARGS...]"},
		{"-n 1 echo ran : -n 2 --env A=1 --", "goccl run: context 2: no program given"},
		{"-n 1 echo ran : echo ran", "goccl run: context 2 (echo): no number of ranks: give -n N before echo"},
		{"echo ran : -n 1 echo ran", "goccl run: context 1 (echo): no number of ranks: give -n N before echo"},
		{"-n 1 echo ran : --env A=1 /bin/echo ran", "goccl run: context 2 (/bin/echo): no number of ranks"},
		{"-n 1 echo ran : -n 0 echo ran", `goccl run: context 2: invalid value "0" for flag -n: must be at least 1`},
		{"-n 1 echo ran : -n 1 echo ran : -np 0 echo ran", `goccl run: context 3: invalid value "0" for flag -np: must be at least 1`},
		{"-n 1 echo ran : -np 1 --grace 1s echo ran", "goccl run: context 2: --grace is the whole job's: give it in the first context, before the first PROG"},
		{"-n 1 echo ran : -np 1 -metrics-addr=:1 echo ran", "goccl run: context 2: --metrics-addr is the whole job's"},
		{"-n 1 echo ran : -n 1 --nproc-per-node 2 echo ran", "goccl run: context 2: -n 1 and --nproc-per-node 2 disagree: give the number of ranks once"},
		{"-n 1 echo ran : -n 1 --bogus echo ran", `goccl run: context 2: unknown flag "--bogus"`},
		{"-n 1 -evn A=1 echo ran : -n 1 echo ran", `goccl run: context 1: unknown flag "-evn"; did you mean "-env"?`},
	} {
		var o, e bytes.Buffer
		args := append([]string{"run"}, strings.Fields(tc.args)...)
		if code := cli(args, &o, &e); code != 2 || o.Len() != 0 || !strings.Contains(e.String(), tc.want) {
			t.Errorf("goccl run %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, code, o.String(), e.String(), tc.want)
		}
	}
}

// TestRunMPMD: goccl run with three contexts of two programs (the test
// binary, sh, the test binary again) numbers the ranks across them, gives
// every rank the total world size, each context's --env and ARGS to its
// ranks only, and --metrics-addr's variable to all.
func TestRunMPMD(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := `for k in ` + config.Rank.Name + ` ` + config.WorldSize.Name + ` ` + config.LocalRank.Name + ` ` + config.LocalWorldSize.Name +
		` RANK WORLD_SIZE LOCAL_WORLD_SIZE OMPI_COMM_WORLD_SIZE MASTER_PORT ` + config.MetricsAddr.Name + ` ` + rankEnvHelper + ` MPMD_A MPMD_B; do
	eval "echo $k=\${$k-unset}"
done
echo "args=$*"`
	stdout, stderr, code := runGoccl(t, "run", "--metrics-addr", ":9400",
		"-n", "1", "--env", rankEnvHelper+"=1", "--env", "MPMD_A=one", exe,
		":", "-np", "2", "-env", "MPMD_B=two", "sh", "-c", script, "sh", "x", "y z",
		":", "--nproc-per-node=1", "--env", rankEnvHelper+"=1", exe)
	if code != 0 {
		t.Fatalf("exit code %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	vals := rankLines(t, stdout)
	store, masterPort := vals[config.StoreAddr.Name][0], vals["MASTER_PORT"][0]
	if store == "" || masterPort == "" {
		t.Fatalf("no store address or MASTER_PORT in\n%s", stdout)
	}
	for r := 0; r < 4; r++ {
		rs := strconv.Itoa(r)
		want := map[string]string{
			config.Rank.Name: rs, config.WorldSize.Name: "4", config.LocalRank.Name: rs, config.LocalWorldSize.Name: "4",
			"RANK": rs, "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4", "OMPI_COMM_WORLD_SIZE": "4", "MASTER_PORT": masterPort,
		}
		if r == 1 || r == 2 { // sh
			want[config.MetricsAddr.Name] = ":9400"
			want["MPMD_A"], want["MPMD_B"], want[rankEnvHelper] = "unset", "two", "unset"
			want["args"] = "x y z"
		} else { // the test binary, as a rank program
			want[config.StoreAddr.Name] = store
			want["FromEnv"] = "ok:true err:<nil> source:goccl rank:" + rs + " size:4 local:" + rs + " store:" + store
		}
		for k, v := range want {
			if got, ok := vals[k][r]; got != v || !ok {
				t.Errorf("rank %d: %s=%q, want %q", r, k, got, v)
			}
		}
	}
	if t.Failed() {
		t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
}

// TestRunMPMDFailure: a rank of the second context fails; the first
// context's ranks (another program) are stopped at once, and goccl run
// names the failed rank and its program and exits with its status.
func TestRunMPMDFailure(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fail := `while [ ! -e "$D/pid0" ] || [ ! -e "$D/pid1" ]; do sleep 0.01; done; echo failing; exit 4`
	start := time.Now()
	stdout, stderr, code := runGoccl(t, "run", "-n", "2", "--env", pidSleepHelper+"="+dir, exe,
		":", "-n", "1", "--env", "D="+dir, "sh", "-c", fail)
	if code != 4 {
		t.Errorf("exit code %d, want 4\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "[2] failing\n") {
		t.Errorf("stdout lacks rank 2's line:\n%s", stdout)
	}
	want := `(?m)^goccl run: rank 2 \(pid \d+, sh -c "while \[ ! -e \\"\$D/pid0\\" \] \|\| \[ ! -e \\"\$D/pid1\\" \]; do sleep 0\.01; done; \.\.\.\) exited with status 4; stopped the other 2 ranks$`
	if !regexp.MustCompile(want).MatchString(stderr) {
		t.Errorf("stderr does not match %s:\n%s", want, stderr)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("took %v to stop the first context's ranks", d)
	}
	for r := 0; r < 2; r++ {
		b, err := os.ReadFile(filepath.Join(dir, "pid"+strconv.Itoa(r)))
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := strconv.Atoi(string(b))
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("rank %d (pid %d) of the first context still there (kill 0: %v)", r, pid, err)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// TestRunHelpMPMD: goccl run -h shows the colon syntax, with a Go program
// and a Python script in one job.
func TestRunHelpMPMD(t *testing.T) {
	var o, e bytes.Buffer
	if code := cli([]string{"run", "-h"}, &o, &e); code != 0 {
		t.Fatalf("exit %d", code)
	}
	help := o.String() + e.String()
	for _, want := range []string{
		"PROG1 [ARGS1...] : -n N2 [--env KEY=VALUE]... PROG2 [ARGS2...] [: ...]",
		"goccl run -n 1 ./coordinator : -n 2 /usr/bin/python3 train.py --lr 0.1",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
}

// TestRunMixedTorchGloo: goccl run starts a mixed job, a Go rank of package
// gloo (examples/torch-gloo) beside two PyTorch ranks, which find one
// another through the c10d store goccl run serves (JoinEnv must use
// MASTER_ADDR/MASTER_PORT, not goccl's own store address).
func TestRunMixedTorchGloo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PyTorch (seconds)")
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import torch.distributed").Run(); err != nil {
		t.Skipf("/usr/bin/python3 cannot import torch.distributed (Debian python3-torch): %v", err)
	}
	t.Setenv("GLOO_SOCKET_IFNAME", "lo")
	stdout, stderr, code := runGoccl(t, "run", "-n", "1", "../../examples/torch-gloo", "-epochs", "2", "-timeout", "2m",
		":", "-n", "2", "/usr/bin/python3", "../../examples/torch-gloo/train.py")
	if code != 0 {
		t.Fatalf("exit code %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"[0] largest difference between the Go copy and trainer rank 1's parameters: 0\n",
		"[1] trainer rank 1: done", "[2] trainer rank 2: done",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s\nstderr:\n%s", want, stdout, stderr)
		}
	}
}
