package rendezvous_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/rendezvous"
)

// TestInitTorchrunAgentStore runs goccl.Init in 2 processes (this test
// binary re-executed) with the variables torchrun gives its workers when
// its agent serves the job's store (TORCHELASTIC_USE_AGENT_STORE=True), a
// PyTorch TCPStore standing for the agent's on MASTER_PORT, and an
// AllReduce. Without the c10d client rank 0 fails to serve goccl's store
// on MASTER_PORT (address already in use).
func TestInitTorchrunAgentStore(t *testing.T) {
	if os.Getenv("GOCCL_TEST_C10D_CHILD") != "" {
		torchrunChild(t)
		return
	}
	addr, version := rendezvous.StartTorchStore(t)
	host, port, _ := net.SplitHostPort(addr)
	const world = 2
	outs := make([]strings.Builder, world)
	cmds := make([]*exec.Cmd, world)
	for r := range world {
		cmd := exec.Command(os.Args[0], "-test.run=^TestInitTorchrunAgentStore$", "-test.count=1", "-test.v")
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "GOCCL_") && !strings.HasPrefix(kv, "TORCHELASTIC_") {
				env = append(env, kv)
			}
		}
		cmd.Env = append(env, "GOCCL_TEST_C10D_CHILD=1",
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(world), "LOCAL_RANK="+strconv.Itoa(r),
			"LOCAL_WORLD_SIZE="+strconv.Itoa(world), "GROUP_RANK=0", "ROLE_RANK="+strconv.Itoa(r),
			"MASTER_ADDR="+host, "MASTER_PORT="+port,
			"TORCHELASTIC_USE_AGENT_STORE=True", "TORCHELASTIC_RUN_ID=goccl-test", "TORCHELASTIC_RESTART_COUNT=0")
		cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("rank %d: %v\n%s", r, err, outs[r].String())
		}
	}
	if !t.Failed() {
		t.Logf("2 ranks did an AllReduce through torch %s's TCPStore at %s", version, addr)
	}
}

func torchrunChild(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := goccl.Init(ctx)
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	defer c.Close()
	send := []float32{float32(c.Rank() + 1), 10}
	recv := make([]float32, len(send))
	if err := goccl.AllReduce(ctx, c, send, recv, len(send), goccl.Sum); err != nil {
		t.Fatalf("AllReduce: %v", err)
	}
	if recv[0] != 3 || recv[1] != 20 {
		t.Fatalf("rank %d: AllReduce = %v, want [3 20]", c.Rank(), recv)
	}
	fmt.Printf("rank %d of %d: AllReduce = %v; TORCHELASTIC_USE_AGENT_STORE=%s\n", c.Rank(), c.Size(), recv, os.Getenv("TORCHELASTIC_USE_AGENT_STORE"))
}

// TestTorchrunEndToEnd runs this test binary as the 2 workers of a real
// torchrun (PyTorch's torch.distributed.run, --no_python): its agent serves
// the c10d TCPStore on --master_port and tells the workers so
// (TORCHELASTIC_USE_AGENT_STORE=True, the default "static" rendezvous, also
// in torch 1.13); each worker runs torchrunChild.
func TestTorchrunEndToEnd(t *testing.T) {
	if os.Getenv("GOCCL_TEST_C10D_CHILD") != "" {
		torchrunChild(t)
		return
	}
	const python = "/usr/bin/python3"
	if out, err := exec.Command(python, "-m", "torch.distributed.run", "--help").CombinedOutput(); err != nil {
		t.Skipf("no torchrun: %s -m torch.distributed.run --help: %v: %.200s", python, err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// -r 2 -t 2: stderr to log files and the console. The default, 0,
	// breaks torch 1.13's torchrun under Python 3.11 and later (a Flag of
	// value 0 is not found by iteration there).
	cmd := exec.CommandContext(ctx, python, "-m", "torch.distributed.run", "--nproc_per_node", "2",
		"--master_addr", "127.0.0.1", "--master_port", port, "-r", "2", "-t", "2", "--log_dir", t.TempDir(),
		"--no_python", os.Args[0], "-test.run=^TestTorchrunEndToEnd$", "-test.count=1", "-test.v")
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOCCL_") && !strings.HasPrefix(kv, "TORCHELASTIC_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "GOCCL_TEST_C10D_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("torchrun: %v\n%s", err, out)
	}
	for r := range 2 {
		want := fmt.Sprintf("rank %d of 2: AllReduce = [3 20]; TORCHELASTIC_USE_AGENT_STORE=True", r)
		if !strings.Contains(string(out), want) {
			t.Fatalf("torchrun output lacks %q:\n%s", want, out)
		}
	}
}
