package bootstrap

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/rails"
	"github.com/goccl/goccl/transport/roce"
)

// TestFromEnvNamesVariable: a bad value of a transport's variable fails
// FromEnv with an error naming the variable and the value.
func TestFromEnvNamesVariable(t *testing.T) {
	for _, tc := range []struct{ name, value string }{
		{"GOCCL_SHM_DISABLE", "maybe"},
		{"GOCCL_NSOCKS_PERPEER", "0"},
		{"GOCCL_NET", "carrier-pigeon"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.name, tc.value)
			if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), tc.name) || !strings.Contains(err.Error(), tc.value) {
				t.Fatalf("FromEnv with %s=%s: %v, want an error naming both", tc.name, tc.value, err)
			}
		})
	}
	t.Run("GOCCL_IB_TIMEOUT", func(t *testing.T) {
		t.Setenv("GOCCL_NET", "roce")
		t.Setenv("GOCCL_IB_TIMEOUT", "99")
		if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), "GOCCL_IB_TIMEOUT") {
			t.Fatalf("FromEnv: %v, want an error naming GOCCL_IB_TIMEOUT", err)
		}
	})
}

// TestTableRoCE: with GOCCL_NET=roce the table gives same-host peers to
// shared memory and, with shared memory off, every peer to RoCE; either way
// the RoCE row offers a Registrar and a OneSided that names exactly its
// peers. Without it nothing is offered.
func TestTableRoCE(t *testing.T) {
	for _, tc := range []struct {
		net, shmOff string
		wantRoCE    bool // links over RoCE
		wantCaps    bool
	}{
		{"roce", "1", true, true},
		{"roce", "0", false, true},
		{"socket", "1", false, false},
	} {
		t.Run(tc.net+"-shmoff"+tc.shmOff, func(t *testing.T) {
			t.Setenv("GOCCL_NET", tc.net)
			t.Setenv("GOCCL_SHM_DISABLE", tc.shmOff)
			t.Setenv("GOCCL_SHM_DIR", t.TempDir())
			t.Setenv("GOCCL_IB_TIMEOUT", "16")
			res, errs := connectAll(t, 3, nil)
			defer release(res)
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			for r, x := range res {
				one, hasOne := Cap[*OneSided](x.Caps)
				reg, hasReg := Cap[Registrar](x.Caps)
				if hasOne != tc.wantCaps || hasReg != tc.wantCaps {
					t.Fatalf("rank %d: OneSided %v, Registrar %v; want %v", r, hasOne, hasReg, tc.wantCaps)
				}
				for p, l := range x.Links {
					if p == r {
						continue
					}
					_, isRoCE := l.(*roce.Link)
					if isRoCE != tc.wantRoCE {
						t.Errorf("rank %d: link to %d is %s, want RoCE %v", r, p, l.Name(), tc.wantRoCE)
					}
					if hasOne && one.Peers[p] != isRoCE {
						t.Errorf("rank %d: OneSided.Peers[%d] = %v, link %s", r, p, one.Peers[p], l.Name())
					}
				}
				if hasReg {
					checkRegistrar(t, reg)
				}
			}
		})
	}
}

// checkRegistrar registers a buffer, refuses an overlapping one (ErrOverlap)
// and deregisters.
func checkRegistrar(t *testing.T, reg Registrar) {
	t.Helper()
	buf := make([]byte, 4096)
	region, err := reg.Register(buf)
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	if _, err := reg.Register(buf[100:200]); !errors.Is(err, ErrOverlap) {
		t.Errorf("Register of an overlapping buffer: %v, want ErrOverlap", err)
	}
	if err := region.Deregister(); err != nil {
		t.Errorf("Deregister: %v", err)
	}
}

// TestRoCECongestionVariables: GOCCL_IB_TC and GOCCL_IB_DCQCN become the
// devices' options; values out of range, and DCQCN parameters that are
// not, are errors naming the variable.
func TestRoCECongestionVariables(t *testing.T) {
	t.Setenv("GOCCL_NET", "roce")
	count := func() int {
		t.Helper()
		p, err := roceFromEnv()
		if err != nil {
			t.Fatal(err)
		}
		return len(p.(roceNet).devOpts)
	}
	base := count()
	t.Setenv("GOCCL_IB_TC", "106")
	if got := count(); got != base+1 {
		t.Errorf("GOCCL_IB_TC=106: %d device options, want %d", got, base+1)
	}
	t.Setenv("GOCCL_IB_DCQCN", "500")
	if got := count(); got != base+2 {
		t.Errorf("GOCCL_IB_DCQCN=500: %d device options, want %d", got, base+2)
	}
	for _, kv := range [][2]string{{"GOCCL_IB_TC", "256"}, {"GOCCL_IB_DCQCN", "-1"}, {"GOCCL_IB_DCQCN", "fast"}, {"GOCCL_IB_QPS_PER_CONNECTION", "0"}, {"GOCCL_IB_QPS_PER_CONNECTION", "65"}, {"GOCCL_IB_DCQCN_PARAMS", "rpg_time_rest=9ms"}} {
		t.Run(kv[0]+"="+kv[1], func(t *testing.T) {
			t.Setenv(kv[0], kv[1])
			if _, err := roceFromEnv(); err == nil || !strings.Contains(err.Error(), kv[0]) {
				t.Errorf("%s=%s: error %v, want one naming the variable", kv[0], kv[1], err)
			}
		})
	}
}

// TestRoCEQPsPerConnection: GOCCL_IB_QPS_PER_CONNECTION=3 links each pair
// over three queue pairs, each sending from a UDP source port of its own
// (the device's, then two more), under one link that splits large
// messages over them and deals small ones round; the peers are not
// offered to one-sided access (a window needs one queue pair per peer).
func TestRoCEQPsPerConnection(t *testing.T) {
	const qps = 3
	t.Setenv("GOCCL_NET", "roce")
	t.Setenv("GOCCL_SHM_DISABLE", "1")
	t.Setenv("GOCCL_IB_QPS_PER_CONNECTION", strconv.Itoa(qps))
	res, errs := connectAll(t, 2, nil)
	defer release(res)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r, x := range res {
		p := 1 - r
		l, ok := x.Links[p].(*rails.Link)
		if !ok || len(l.Rails()) != qps || !strings.HasPrefix(l.Name(), "3 queue pairs [qp0 NET/RoCE") {
			t.Fatalf("rank %d: link to %d is %T %q, want %d queue pairs", r, p, x.Links[p], x.Links[p].Name(), qps)
		}
		ports := map[string]bool{}
		for i, q := range l.Rails() {
			if _, ok := q.Link.(*roce.Link); !ok {
				t.Fatalf("rank %d: queue pair %d's link is %T", r, i, q.Link)
			}
			_, port, _ := strings.Cut(q.Link.Name(), "source port ")
			ports[port] = true
		}
		if len(ports) != qps {
			t.Errorf("rank %d: %d different source ports among %s, want %d", r, len(ports), l.Name(), qps)
		}
		if one, _ := Cap[*OneSided](x.Caps); one == nil || one.Peers[p] {
			t.Errorf("rank %d: OneSided %+v: want it, without peer %d", r, one, p)
		}
	}
	// A striped message and small ones, each way.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, n := range []int{4<<20 + 192, 100, 200, 300, 4096} {
		var wg sync.WaitGroup
		for r := range 2 {
			out, in := make([]byte, n), make([]byte, n)
			for i := range out {
				out[i] = byte(i*7 + r + n)
			}
			wg.Go(func() {
				h := transport.Header{Op: 1, Root: -1, Count: uint64(n), Bytes: uint64(n)}
				if err := res[r].Links[1-r].Send(ctx, &h, out); err != nil {
					t.Errorf("rank %d: Send of %d bytes: %v", r, n, err)
				}
			})
			wg.Go(func() {
				h := transport.Header{Op: 1, Root: -1, Count: uint64(n), Bytes: uint64(n)}
				if err := res[r].Links[1-r].Recv(ctx, &h, in, nil); err != nil {
					t.Errorf("rank %d: Recv of %d bytes: %v", r, n, err)
					return
				}
				for i, b := range in {
					if want := byte(i*7 + (1 - r) + n); b != want {
						t.Errorf("rank %d: byte %d of %d is %d, want %d", r, i, n, b, want)
						return
					}
				}
			})
		}
		wg.Wait()
	}
}
