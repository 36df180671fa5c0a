package collnet

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/reduce"
	"github.com/goccl/goccl/rdma"
	"github.com/goccl/goccl/transport/roce"
)

// dom is a RoCE domain on a fresh soft device on loopback, closed when
// the test ends; nil when !on.
func dom(t *testing.T, on bool) *roce.Domain {
	t.Helper()
	if !on {
		return nil
	}
	d, err := rdma.Open("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return roce.NewDomain(d)
}

// nets runs f over TCP and over RoCE (every node and rank with a device).
func nets(t *testing.T, f func(t *testing.T, useRoCE bool)) {
	for _, on := range []bool{false, true} {
		t.Run(map[bool]string{false: "tcp", true: "roce"}[on], func(t *testing.T) { f(t, on) })
	}
}

// startNode serves a node on loopback until the test ends.
func startNode(t *testing.T, cfg Config) (*Node, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := NewNode(ln, cfg)
	done := make(chan error, 1)
	go func() { done <- n.Serve(context.Background()) }()
	t.Cleanup(func() {
		n.Close()
		<-done
	})
	return n, ln.Addr().String()
}

// tree starts a root of fan-in rootFan and leaves leaves of fan-in leafFan
// registered with it; it returns the nodes (root first) and the root's
// address.
func tree(t *testing.T, rootFan, leaves, leafFan int, useRoCE bool) ([]*Node, string) {
	t.Helper()
	root, addr := startNode(t, Config{Fanin: rootFan, RoCE: dom(t, useRoCE)})
	nodes := []*Node{root}
	for range leaves {
		l, _ := startNode(t, Config{Fanin: leafFan, Parent: addr, RoCE: dom(t, useRoCE)})
		nodes = append(nodes, l)
	}
	// Wait until the leaves have registered.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		root.mu.Lock()
		n := len(root.leaves)
		root.mu.Unlock()
		if n == leaves {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d leaves registered", n, leaves)
		}
	}
	return nodes, addr
}

// ranks attaches size ranks of a fresh job (each with a RoCE device when
// useRoCE) and runs f on each.
func ranks(t *testing.T, root string, size int, useRoCE bool, f func(r int, c *Client) error) []error {
	t.Helper()
	var job JobID
	copy(job[:], fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano()))
	errs := make([]error, size)
	doms := make([]*roce.Domain, size)
	for r := range doms {
		doms[r] = dom(t, useRoCE)
	}
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := Attach(ctx, root, job, r, size, doms[r])
			if err != nil {
				errs[r] = err
				return
			}
			defer c.Close()
			errs[r] = f(r, c)
		})
	}
	wg.Wait()
	return errs
}

func f32s(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// allReduceChecked runs float32 sum and int64 max AllReduces of each count
// (elements), in place and out of place, and checks every element.
func allReduceChecked(r, size int, c *Client, counts []int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seq := uint64(0)
	for _, n := range counts {
		for _, inPlace := range []bool{false, true} {
			seq++
			send := make([]byte, 4*n)
			for i := range n {
				binary.LittleEndian.PutUint32(send[4*i:], math.Float32bits(float32(r*1000+i%977)))
			}
			recv := send
			if !inPlace {
				recv = make([]byte, 4*n)
			}
			if err := c.AllReduce(ctx, seq, send, recv, uint8(reduce.Float32), uint8(reduce.Sum), 4); err != nil {
				return err
			}
			for i, v := range f32s(recv) {
				want := float32(1000*size*(size-1)/2 + size*(i%977))
				if v != want {
					return fmt.Errorf("float32 sum of %d elements (in place %v): element %d is %v, want %v", n, inPlace, i, v, want)
				}
			}
			seq++
			b := make([]byte, 8*n)
			for i := range n {
				binary.LittleEndian.PutUint64(b[8*i:], uint64(int64((r*7+i)%size)-3))
			}
			if err := c.AllReduce(ctx, seq, b, b, uint8(reduce.Int64), uint8(reduce.Max), 8); err != nil {
				return err
			}
			for i := range n {
				if v := int64(binary.LittleEndian.Uint64(b[8*i:])); v != int64(size-1)-3 {
					return fmt.Errorf("int64 max of %d elements: element %d is %d, want %d", n, i, v, size-4)
				}
			}
		}
	}
	return nil
}

// TestFlat: 3 ranks on one root; sizes around the chunk size and far above
// it; every element checked.
func TestFlat(t *testing.T) {
	nets(t, func(t *testing.T, useRoCE bool) {
		_, root := startNode(t, Config{Fanin: 4, RoCE: dom(t, useRoCE)})
		counts := []int{0, 1, 7, ChunkBytes/4 - 1, ChunkBytes / 4, 1000003}
		for r, err := range ranks(t, root, 3, useRoCE, func(r int, c *Client) error {
			if c.Node() != root {
				return fmt.Errorf("attached to %s, not the root %s", c.Node(), root)
			}
			if c.RoCE() != useRoCE {
				return fmt.Errorf("data path over RoCE: %v, want %v", c.RoCE(), useRoCE)
			}
			return allReduceChecked(r, 3, c, counts)
		}) {
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
			}
		}
	})
}

// TestRoCEOneSided: a rank with a device attached to a node without one,
// and a rank without one to a node with one, stay on TCP and work.
func TestRoCEOneSided(t *testing.T) {
	for _, nodeRoCE := range []bool{false, true} {
		_, root := startNode(t, Config{Fanin: 4, RoCE: dom(t, nodeRoCE)})
		for r, err := range ranks(t, root, 2, !nodeRoCE, func(r int, c *Client) error {
			if c.RoCE() {
				return errors.New("data path over RoCE with a device at one end only")
			}
			return allReduceChecked(r, 2, c, []int{1, 300000})
		}) {
			if err != nil {
				t.Errorf("node with a device %v: rank %d: %v", nodeRoCE, r, err)
			}
		}
	}
}

// TestTree: 5 ranks over a root of fan-in 3 and three leaves of fan-in 2:
// ranks 0-1, 2-3 and 4 on a leaf each; every element checked.
func TestTree(t *testing.T) {
	nets(t, func(t *testing.T, useRoCE bool) {
		nodes, root := tree(t, 3, 3, 2, useRoCE)
		leaves := map[string]bool{}
		for _, n := range nodes[1:] {
			leaves[n.cfg.Advertise] = true
		}
		var mu sync.Mutex
		at := map[string][]int{}
		for r, err := range ranks(t, root, 5, useRoCE, func(r int, c *Client) error {
			if !leaves[c.Node()] {
				return fmt.Errorf("attached to %s, not a leaf", c.Node())
			}
			if c.RoCE() != useRoCE {
				return fmt.Errorf("data path over RoCE: %v, want %v", c.RoCE(), useRoCE)
			}
			mu.Lock()
			at[c.Node()] = append(at[c.Node()], r)
			mu.Unlock()
			return allReduceChecked(r, 5, c, []int{1, 100, 300000})
		}) {
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
			}
		}
		if len(at) != 3 {
			t.Errorf("ranks by leaf: %v, want 3 leaves", at)
		}
	})
}

// TestPlacementRefused: a job larger than the tree can take is refused
// at attach, saying why.
func TestPlacementRefused(t *testing.T) {
	_, root := tree(t, 2, 1, 2, false)
	errs := ranks(t, root, 5, false, func(int, *Client) error { return nil })
	for r, err := range errs {
		if !errors.Is(err, ErrAggregation) || !strings.Contains(err.Error(), "needs 3 leaf aggregation nodes of fan-in 2; 1 registered") {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestMismatch: ranks that disagree on the operation's size all fail with
// the root's account naming both.
func TestMismatch(t *testing.T) {
	_, root := startNode(t, Config{Fanin: 4})
	errs := ranks(t, root, 2, false, func(r int, c *Client) error {
		b := make([]byte, 4*(r+1))
		return c.AllReduce(context.Background(), 1, b, b, uint8(reduce.Float32), uint8(reduce.Sum), 4)
	})
	for r, err := range errs {
		if !errors.Is(err, ErrAggregation) || !strings.Contains(err.Error(), "operations differ: rank 0 sent op #1 of 4 bytes") ||
			!strings.Contains(err.Error(), "rank 1 sent op #1 of 8 bytes") || !strings.Contains(err.Error(), "aggregation node "+root) {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestNodeKilled: a leaf that dies while AllReduces run fails the
// operation at every rank, and every error names the dead node — its own
// ranks see their connection end, the others get the root's account
// through their leaf.
func TestNodeKilled(t *testing.T) {
	nets(t, testNodeKilled)
}

func testNodeKilled(t *testing.T, useRoCE bool) {
	nodes, root := tree(t, 2, 2, 2, useRoCE)
	victim := nodes[2]
	name := victim.cfg.Advertise
	errs := ranks(t, root, 4, useRoCE, func(r int, c *Client) error {
		b := make([]byte, 8<<20)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for seq := uint64(1); ; seq++ {
			if r == 0 && seq == 3 {
				go func() {
					time.Sleep(time.Millisecond)
					victim.Close()
				}()
			}
			if err := c.AllReduce(ctx, seq, b, b, uint8(reduce.Float32), uint8(reduce.Sum), 4); err != nil {
				return err
			}
		}
	})
	for r, err := range errs {
		if !errors.Is(err, ErrAggregation) || !strings.Contains(err.Error(), name) {
			t.Errorf("rank %d: %v (want an error naming %s)", r, err, name)
		} else {
			t.Logf("rank %d: %v", r, err)
		}
	}
}

// TestLeafOnAllInterfaces: a leaf listening on 0.0.0.0 without an
// advertised address registers the address it reached the root from, and
// ranks the root sends there arrive.
func TestLeafOnAllInterfaces(t *testing.T) {
	root, rootAddr := startNode(t, Config{Fanin: 1})
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	leaf := NewNode(ln, Config{Fanin: 2, Parent: rootAddr})
	done := make(chan error, 1)
	go func() { done <- leaf.Serve(context.Background()) }()
	t.Cleanup(func() { leaf.Close(); <-done })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	want := net.JoinHostPort("127.0.0.1", port)
	for deadline := time.Now().Add(5 * time.Second); root.Leaves() < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the leaf did not register")
		}
	}
	root.mu.Lock()
	got := root.leaves[0].addr
	root.mu.Unlock()
	if got != want {
		t.Fatalf("the leaf registered as %s, want %s", got, want)
	}
	for r, err := range ranks(t, rootAddr, 2, false, func(r int, c *Client) error {
		if c.Node() != want {
			return fmt.Errorf("sent to %s, want the leaf %s", c.Node(), want)
		}
		return allReduceChecked(r, 2, c, []int{1, 1000})
	}) {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
