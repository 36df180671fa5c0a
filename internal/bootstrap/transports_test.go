package bootstrap

import (
	"errors"
	"strings"
	"testing"

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
// devices' options; values out of range are errors naming the variable.
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
	for _, kv := range [][2]string{{"GOCCL_IB_TC", "256"}, {"GOCCL_IB_DCQCN", "-1"}, {"GOCCL_IB_DCQCN", "fast"}} {
		t.Run(kv[0]+"="+kv[1], func(t *testing.T) {
			t.Setenv(kv[0], kv[1])
			if _, err := roceFromEnv(); err == nil || !strings.Contains(err.Error(), kv[0]) {
				t.Errorf("%s=%s: error %v, want one naming the variable", kv[0], kv[1], err)
			}
		})
	}
}
