package etcd_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/internal/etcdtest"
	"github.com/goccl/goccl/rendezvous"
)

// TestInitEtcd runs goccl.Init in 3 processes (this test binary
// re-executed) with GOCCL_STORE=etcd://... naming an embedded etcd server:
// every rank is a client of etcd. Each rank makes two communicators in
// turn (Init, AllReduce, Close, twice: two generations under the job's
// prefix); afterwards nothing of the job is left in etcd (the last rank's
// Close revokes each generation's lease).
func TestInitEtcd(t *testing.T) {
	if os.Getenv("GOCCL_TEST_ETCD_CHILD") != "" {
		etcdChild(t)
		return
	}
	srv := etcdtest.Shared(t)
	var b [6]byte
	rand.Read(b[:])
	job := "init-" + hex.EncodeToString(b[:])
	url := srv.URL("/goccl-test/")
	const world = 3
	outs := make([]strings.Builder, world)
	cmds := make([]*exec.Cmd, world)
	for r := range world {
		cmd := exec.Command(os.Args[0], "-test.run=^TestInitEtcd$", "-test.count=1", "-test.v")
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "GOCCL_") && !strings.HasPrefix(kv, "TORCHELASTIC_") && !strings.HasPrefix(kv, "MASTER_") {
				env = append(env, kv)
			}
		}
		cmd.Env = append(env, "GOCCL_TEST_ETCD_CHILD=1",
			config.Rank.Name+"="+strconv.Itoa(r), config.WorldSize.Name+"="+strconv.Itoa(world),
			config.JobID.Name+"="+job, config.Store.Name+"="+url)
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
	if t.Failed() {
		return
	}
	for r := range world {
		if want := fmt.Sprintf("rank %d of 3: 2 communicators through etcd", r); !strings.Contains(outs[r].String(), want) {
			t.Fatalf("rank %d's output lacks %q:\n%s", r, want, outs[r].String())
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, prefix, _ := rendezvous.ParseEtcdURL(url)
	resp, err := cli.Get(ctx, prefix+job+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Fatalf("%d keys of the job left under %s%s/ after every rank closed", resp.Count, prefix, job)
	}
	t.Logf("3 ranks made 2 communicators each through etcd at %s; no key left", srv.Endpoint)
}

func etcdChild(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rank, size int
	for gen := range 2 {
		c, err := goccl.Init(ctx)
		if err != nil {
			t.Fatalf("Init %d: %v", gen+1, err)
		}
		rank, size = c.Rank(), c.Size()
		send := []float32{float32(rank + 1), float32(gen)}
		recv := make([]float32, len(send))
		if err := goccl.AllReduce(ctx, c, send, recv, len(send), goccl.Sum); err != nil {
			t.Fatalf("AllReduce: %v", err)
		}
		if recv[0] != 6 || recv[1] != float32(3*gen) {
			t.Fatalf("rank %d: AllReduce = %v, want [6 %d]", rank, recv, 3*gen)
		}
		if err := c.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	fmt.Printf("rank %d of %d: 2 communicators through etcd\n", rank, size)
}
