package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/collnet"
	"github.com/goccl/goccl/rdma"
	"github.com/goccl/goccl/rendezvous"
	"github.com/goccl/goccl/transport/roce"
)

// aggd serves an aggregation tree in this process — a root of fan-in
// rootFan and leaves of fan-in leafFan, each node with a soft RoCE device
// when useRoCE — and returns its nodes (root first) and the root's address.
func aggd(t *testing.T, rootFan, leaves, leafFan int, useRoCE bool) ([]*collnet.Node, string) {
	t.Helper()
	serve := func(cfg collnet.Config) (*collnet.Node, string) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if useRoCE {
			d, err := rdma.Open("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			cfg.RoCE = roce.NewDomain(d)
		}
		n := collnet.NewNode(ln, cfg)
		done := make(chan struct{})
		go func() { n.Serve(context.Background()); close(done) }()
		t.Cleanup(func() { n.Close(); <-done })
		return n, ln.Addr().String()
	}
	root, addr := serve(collnet.Config{Fanin: rootFan})
	nodes := []*collnet.Node{root}
	for range leaves {
		n, _ := serve(collnet.Config{Fanin: leafFan, Parent: addr})
		nodes = append(nodes, n)
	}
	for deadline := time.Now().Add(5 * time.Second); root.Leaves() < leaves; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d leaves registered", root.Leaves(), leaves)
		}
	}
	return nodes, addr
}

// TestCollNet: with GOCCL_COLLNET_ENABLE=1, AllReduce goes through the
// aggregation tree — 4 ranks over a root and two leaves — for every
// operator and several types, in and out of place, with results the same
// as the links'; the other collectives still run on the links. With
// GOCCL_NET=roce and nodes that have RoCE devices, the tree's data path
// runs over RoCE queue pairs.
func TestCollNet(t *testing.T) {
	for _, useRoCE := range []bool{false, true} {
		t.Run(map[bool]string{false: "tcp", true: "roce"}[useRoCE], func(t *testing.T) { testCollNet(t, useRoCE) })
	}
}

func testCollNet(t *testing.T, useRoCE bool) {
	_, root := aggd(t, 2, 2, 2, useRoCE)
	t.Setenv("GOCCL_COLLNET_ENABLE", "1")
	t.Setenv("GOCCL_COLLNET_AGGD", root)
	if useRoCE {
		t.Setenv("GOCCL_NET", "roce")
		t.Setenv("GOCCL_SHM_DISABLE", "1")
	}
	errs := goroutineRanks(t, 4, 60*time.Second, func(c *goccl.Comm) error {
		ctx := context.Background()
		if !goccl.UsesCollNet(c) {
			return errors.New("not attached to the aggregation tree")
		}
		if goccl.CollNetOverRoCE(c) != useRoCE {
			return fmt.Errorf("the tree's data path over RoCE: %v, want %v", goccl.CollNetOverRoCE(c), useRoCE)
		}
		counts := []int{0, 1, 65536, 1000003}
		if testing.Short() {
			counts[3] = 100003
		}
		for _, n := range counts {
			for _, op := range []goccl.RedOp{goccl.Sum, goccl.Prod, goccl.Max, goccl.Min, goccl.Avg} {
				in := make([]float64, n)
				for i := range in {
					in[i] = float64((c.Rank()+1)*(i%5+1)) / 4
				}
				out := make([]float64, n)
				if err := goccl.AllReduce(ctx, c, in, out, n, op); err != nil {
					return err
				}
				for i, v := range out {
					x := float64(i%5+1) / 4
					want := map[goccl.RedOp]float64{goccl.Sum: 10 * x, goccl.Prod: 24 * x * x * x * x, goccl.Max: 4 * x, goccl.Min: x, goccl.Avg: 2.5 * x}[op]
					if v != want {
						return fmt.Errorf("%v of %d float64: element %d is %v, want %v", op, n, i, v, want)
					}
				}
			}
			b := make([]int32, n)
			for i := range b {
				b[i] = int32(c.Rank() - i%3)
			}
			if err := goccl.AllReduce(ctx, c, b, b, n, goccl.Sum); err != nil { // in place
				return err
			}
			for i, v := range b {
				if want := int32(6 - 4*(i%3)); v != want {
					return fmt.Errorf("int32 sum in place of %d: element %d is %d, want %d", n, i, v, want)
				}
			}
		}
		// A collective that is not AllReduce runs on the links meanwhile.
		x := []float32{float32(c.Rank())}
		all := make([]float32, 4)
		if err := goccl.AllGather(ctx, c, x, all, 1); err != nil || all[3] != 3 {
			return fmt.Errorf("AllGather %v: %v", all, err)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestCollNetFallback: when the tree cannot be reached (no aggregation
// node at the address), every rank warns and AllReduce runs on the links.
func TestCollNetFallback(t *testing.T) {
	t.Setenv("GOCCL_COLLNET_ENABLE", "1")
	t.Setenv("GOCCL_COLLNET_AGGD", freeAddr(t))
	errs := goroutineRanks(t, 3, 60*time.Second, func(c *goccl.Comm) error {
		if goccl.UsesCollNet(c) {
			return errors.New("attached to a tree that does not exist")
		}
		x := []float32{1, 2}
		if err := goccl.AllReduce(context.Background(), c, x, x, 2, goccl.Sum); err != nil || x[0] != 3 || x[1] != 6 {
			return fmt.Errorf("AllReduce on the links: %v %v", x, err)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestCollNetNodeKilled: a leaf aggregation node killed during AllReduces
// fails the operation at every rank promptly (10 s allowed for a loaded
// machine; the communicators' timeout is a minute) with an error wrapping
// ErrCollNet that names the node; the job then makes a new communicator,
// which finds the tree broken and runs on the links.
func TestCollNetNodeKilled(t *testing.T) {
	nodes, root := aggd(t, 2, 2, 2, false)
	victim := nodes[2].Name()
	t.Setenv("GOCCL_COLLNET_ENABLE", "1")
	t.Setenv("GOCCL_COLLNET_AGGD", root)
	store := rendezvous.NewMemStore()
	comms := initComms(t, 4, store, 60*time.Second)
	var killed atomic.Int64 // unix ns when rank 0 closed the leaf
	var wg sync.WaitGroup
	errs := make([]error, 4)
	took := make([]time.Duration, 4)
	for r, c := range comms {
		if !goccl.UsesCollNet(c) {
			t.Fatalf("rank %d is not attached", r)
		}
		wg.Go(func() {
			buf := make([]float32, 4<<20)
			for i := 0; ; i++ {
				if err := goccl.AllReduce(context.Background(), c, buf, buf, len(buf), goccl.Sum); err != nil {
					errs[r], took[r] = err, time.Since(time.Unix(0, killed.Load()))
					return
				}
				if r == 0 && i == 2 {
					killed.Store(time.Now().UnixNano())
					nodes[2].Close()
				}
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if !errors.Is(err, goccl.ErrCollNet) || !strings.Contains(err.Error(), victim) || took[r] > 10*time.Second {
			t.Errorf("rank %d after %v: %v (want ErrCollNet naming %s within 10 s)", r, took[r], err, victim)
		} else {
			t.Logf("rank %d after %v: %v", r, took[r].Round(time.Millisecond), err)
		}
	}
	// The fallback: a new communicator cannot attach (the root cannot place
	// 4 ranks on the one leaf left) and runs AllReduce on the links.
	errs2 := goroutineRanks(t, 4, 60*time.Second, func(c *goccl.Comm) error {
		if goccl.UsesCollNet(c) {
			return errors.New("attached to a broken tree")
		}
		x := []int64{int64(c.Rank())}
		if err := goccl.AllReduce(context.Background(), c, x, x, 1, goccl.Sum); err != nil || x[0] != 6 {
			return fmt.Errorf("AllReduce on the links: %v %v", x, err)
		}
		return nil
	})
	for r, err := range errs2 {
		if err != nil {
			t.Errorf("new communicator, rank %d: %v", r, err)
		}
	}
}

// TestCollNetChain: on 2 "hosts" of 2 ranks (GOCCL_HOSTID per process),
// AllReduce reduces within each host over its links and sends each local
// rank's share through a tree of its own (NCCL's CollNet chain), over TCP
// and, with GOCCL_NET=roce and a node with a device, over RoCE: the whole
// collective matrix checked, every type and operator.
func TestCollNetChain(t *testing.T) {
	for _, useRoCE := range []bool{false, true} {
		t.Run(map[bool]string{false: "tcp", true: "roce"}[useRoCE], func(t *testing.T) {
			if useRoCE && testing.Short() {
				t.Skip("the RoCE chain runs in the full suite (four race-built processes over soft RoCE took 24 s of the short run)")
			}
			_, root := aggd(t, 4, 0, 0, useRoCE)
			counts := "0,1,7,100003"
			if testing.Short() {
				counts = "0,1,7,1003"
			}
			env := []string{"GOCCL_TEST_HOSTS=a,a,b,b", "GOCCL_TEST_COUNTS=" + counts, "GOCCL_COLLNET_ENABLE=1", "GOCCL_COLLNET_AGGD=" + root,
				"GOCCL_DEBUG=INFO", "GOCCL_DEBUG_SUBSYS=INIT,COLL", "GOCCL_TUNER_PROBE=0"}
			via := "TCP"
			if useRoCE {
				env, via = append(env, "GOCCL_NET=roce"), "RoCE"
			}
			for r, out := range spawn(t, 4, "matrix", env...) {
				for _, want := range []string{"operations checked", "AllReduce uses collnet", ") via " + via,
					fmt.Sprintf("CollNet chain: 2 hosts x 2 ranks; this rank carries local share %d of host %d", r%2, r/2)} {
					if !strings.Contains(out, want) {
						t.Fatalf("rank %d: output lacks %q:\n%s", r, want, out)
					}
				}
			}
		})
	}
}
