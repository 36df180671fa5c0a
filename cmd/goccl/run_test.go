package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/rendezvous"
)

// rankEnvHelper, set to 1, makes the test binary printRankEnv (see TestMain).
const rankEnvHelper = "CLI_TEST_RANK_ENV"

// rankEnvNames are the variables printRankEnv prints.
var rankEnvNames = []string{
	config.Rank.Name, config.WorldSize.Name, config.LocalRank.Name, config.LocalWorldSize.Name, config.StoreAddr.Name,
	"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
	"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
	"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT",
}

// printRankEnv prints rankEnvNames as NAME=VALUE ("<unset>" when unset) and
// what rendezvous.FromEnv reads from them.
func printRankEnv() int {
	for _, k := range rankEnvNames {
		v, ok := os.LookupEnv(k)
		if !ok {
			v = "<unset>"
		}
		fmt.Printf("%s=%s\n", k, v)
	}
	env, ok, err := rendezvous.FromEnv()
	fmt.Printf("FromEnv=ok:%v err:%v source:%s rank:%d size:%d local:%d store:%s\n",
		ok, err, env.Source, env.Rank, env.WorldSize, env.LocalRank, env.StoreAddr)
	return 0
}

// rankLines parses "[r] KEY=VALUE" lines into values per key and rank.
func rankLines(t *testing.T, stdout string) map[string]map[int]string {
	t.Helper()
	vals := map[string]map[int]string{}
	re := regexp.MustCompile(`^\[(\d+)\] ([^=]+)=(.*)$`)
	for _, line := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("unexpected line %q in\n%s", line, stdout)
		}
		r, _ := strconv.Atoi(m[1])
		if vals[m[2]] == nil {
			vals[m[2]] = map[int]string{}
		}
		vals[m[2]][r] = m[3]
	}
	return vals
}

// TestRunNprocSpellings: mpirun's -n and -np and torchrun's --nproc-per-node
// and --nproc_per_node all set the number of ranks.
func TestRunNprocSpellings(t *testing.T) {
	script := "echo rank $" + config.Rank.Name + " of $" + config.WorldSize.Name
	for _, spelling := range [][]string{
		{"-n", "2"}, {"-np", "2"}, {"--np=2"}, {"--nproc-per-node", "2"}, {"--nproc_per_node", "2"},
		{"--nproc-per-node=2"}, {"-nproc_per_node=2"}, {"-n", "2", "--nproc-per-node", "2"},
	} {
		args := append(append([]string{"run"}, spelling...), "sh", "-c", script)
		stdout, stderr, code := runGoccl(t, args...)
		lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
		sort.Strings(lines)
		if code != 0 || strings.Join(lines, "\n") != "[0] rank 0 of 2\n[1] rank 1 of 2" {
			t.Errorf("goccl %q: exit code %d\nstdout:\n%s\nstderr:\n%s", args, code, stdout, stderr)
		}
	}
}

func TestRunNprocErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "2", "--nproc-per-node", "3"}, "goccl run: -n 2 and --nproc-per-node 3 disagree: give the number of ranks once\n"},
		{[]string{"--nproc_per_node=4", "-np", "2"}, "goccl run: --nproc_per_node 4 and -np 2 disagree"},
		{[]string{"-np", "2", "-np", "4"}, "goccl run: -np 2 and -np 4 disagree"},
		{[]string{"-n", "0"}, `invalid value "0" for flag -n: must be at least 1`},
		{[]string{"--nproc-per-node", "gpu"}, `invalid value "gpu" for flag --nproc-per-node: not an integer`},
		{[]string{"-nproc-per-node=gpu"}, `invalid value "gpu" for flag -nproc-per-node: not an integer`},
		{[]string{"-n0"}, `invalid value "0" for flag -n: must be at least 1`},
		{[]string{"-nosuch"}, `invalid value "osuch" for flag -n in "-nosuch": not an integer`},
		{[]string{"-n", "2", "--max-restarts", "-1"}, "goccl run: --max-restarts -1: want 0 (no restarts) or more"},
		{[]string{"-n", "1", "true", ":", "-n", "1", "--max-restarts", "1"}, "goccl run: context 2: --max-restarts is the whole job's"},
	} {
		var o, e bytes.Buffer
		args := append(append([]string{"run"}, tt.args...), "true")
		if code := cli(args, &o, &e); code != 2 || !strings.Contains(e.String(), tt.want) {
			t.Errorf("%q: code %d, stderr %q, want it to contain %q", args, code, e.String(), tt.want)
		}
	}
}

// TestRunRankEnv: the ranks get torchrun's and OpenMPI's variables besides
// goccl's, MASTER_ADDR/MASTER_PORT of the c10d store goccl run serves, as
// torchrun's agent (TORCHELASTIC_USE_AGENT_STORE), and goccl's win in
// rendezvous.FromEnv.
func TestRunRankEnv(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The parent's launcher variables are replaced, not inherited.
	t.Setenv("RANK", "7")
	t.Setenv("OMPI_COMM_WORLD_SIZE", "9")
	for _, k := range []string{"MASTER_ADDR", "MASTER_PORT"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	stdout, stderr, code := runGoccl(t, "run", "-np", "3", "-env", rankEnvHelper+"=1", exe)
	if code != 0 {
		t.Fatalf("exit code %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	vals := rankLines(t, stdout)
	store := vals[config.StoreAddr.Name][0]
	if !regexp.MustCompile(`^127\.0\.0\.1:\d+$`).MatchString(store) {
		t.Fatalf("store address %q", store)
	}
	masterPort := vals["MASTER_PORT"][0]
	if !regexp.MustCompile(`^\d+$`).MatchString(masterPort) || "127.0.0.1:"+masterPort == store {
		t.Fatalf("MASTER_PORT %q (goccl's store at %s)", masterPort, store)
	}
	for r := 0; r < 3; r++ {
		rs := strconv.Itoa(r)
		want := map[string]string{
			config.Rank.Name: rs, config.WorldSize.Name: "3", config.LocalRank.Name: rs, config.LocalWorldSize.Name: "3",
			config.StoreAddr.Name: store,
			"RANK":                rs, "WORLD_SIZE": "3", "LOCAL_RANK": rs, "LOCAL_WORLD_SIZE": "3", "GROUP_RANK": "0",
			"OMPI_COMM_WORLD_RANK": rs, "OMPI_COMM_WORLD_SIZE": "3",
			"OMPI_COMM_WORLD_LOCAL_RANK": rs, "OMPI_COMM_WORLD_LOCAL_SIZE": "3",
			"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": masterPort,
			"TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "0",
			"FromEnv": "ok:true err:<nil> source:goccl rank:" + rs + " size:3 local:" + rs + " store:" + store,
		}
		for k, v := range want {
			if got, ok := vals[k][r]; got != v || !ok {
				t.Errorf("rank %d: %s=%q, want %q", r, k, got, v)
			}
		}
	}
}

// TestRunPyTorch: a PyTorch program started by goccl run joins a Gloo
// process group with init_process_group(init_method="env://") through the
// c10d store goccl run serves, and all-reduces (fails before goccl run
// served one: MASTER_ADDR was not set).
func TestRunPyTorch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PyTorch (seconds)")
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import torch.distributed").Run(); err != nil {
		t.Skipf("/usr/bin/python3 cannot import torch.distributed (Debian python3-torch): %v", err)
	}
	script := filepath.Join(t.TempDir(), "allreduce.py")
	err := os.WriteFile(script, []byte(`
import datetime, os, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=60))
r, n = dist.get_rank(), dist.get_world_size()
assert r == int(os.environ["RANK"]) and n == int(os.environ["WORLD_SIZE"])
x = torch.tensor([float(r + 1), 10.0 * (r + 1)])
dist.all_reduce(x)
print("allreduce", r, n, x.tolist(), flush=True)
dist.destroy_process_group()
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("GLOO_SOCKET_IFNAME", "lo")
	stdout, stderr, code := runGoccl(t, "run", "-np", "3", "/usr/bin/python3", script)
	if code != 0 {
		t.Fatalf("exit code %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for r := 0; r < 3; r++ {
		if want := fmt.Sprintf("[%d] allreduce %d 3 [6.0, 60.0]", r, r); !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s\nstderr:\n%s", want, stdout, stderr)
		}
	}
}
