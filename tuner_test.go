package goccl

import (
	"math"
	"strconv"
	"testing"

	"github.com/goccl/goccl/internal/algo"
	"github.com/goccl/goccl/internal/config"
)

// TestConfigDefaults: the defaults goccl env shows are the ones Init uses.
func TestConfigDefaults(t *testing.T) {
	for _, c := range []struct {
		v    *config.Var
		want string
	}{
		{config.DirectMinBytes, strconv.Itoa(algo.DirectMinBytes)},
		{config.NSocksPerPeer, strconv.Itoa(defaultNSocks)},
		{config.Timeout, DefaultTimeout.String()},
		{config.ProgressNice, strconv.Itoa(defaultProgressNice)},
	} {
		got := c.v.Default
		if c.v == config.Timeout {
			d, err := config.ParseDuration(got)
			if err != nil {
				t.Fatal(err)
			}
			got = d.String()
		}
		if got != c.want {
			t.Errorf("%s: internal/config's default %q, Init uses %q", c.v.Name, got, c.want)
		}
	}
}

// TestHierCrossovers: the sizes from which the tuner runs the hierarchical
// schedules, from measurements. A network 40× slower than shared memory
// with 25× its latency makes them pay from small sizes (AllReduce: flat
// recursive doubling sends the whole vector across from both ranks of a
// host, the hierarchical one half of it from each); a network as fast as
// shared memory moves AllReduce's crossover up, or keeps the flat
// schedules; unusable measurements keep the fixed threshold.
func TestHierCrossovers(t *testing.T) {
	shm := algo.LinkCost{Alpha: 2e-6, Beta: 1 / 5e9}
	slow := algo.Costs{Intra: shm, Inter: algo.LinkCost{Alpha: 50e-6, Beta: 1 / 118e6}}
	fast := algo.Costs{Intra: shm, Inter: shm}
	for _, tc := range []struct {
		name   string
		hostOf []int
	}{
		{"2x2 blocked", []int{0, 0, 1, 1}},
		{"2x2 interleaved", []int{0, 1, 0, 1}},
		{"4x2 blocked", []int{0, 0, 1, 1, 2, 2, 3, 3}},
		{"2x3 blocked", []int{0, 0, 0, 1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ok := algo.HierCrossovers(tc.hostOf, slow)
			if !ok {
				t.Fatal("measurements refused")
			}
			f, _ := algo.HierCrossovers(tc.hostOf, fast)
			t.Logf("slow network: %v; fast network: %v", s, f)
			if s[0] > 4<<10 {
				t.Errorf("slow network: hierarchical AllReduce from %d bytes, want 4 KiB or less", s[0])
			}
			if f[0] <= s[0] {
				t.Errorf("fast network: hierarchical AllReduce from %d bytes, not above the slow network's %d", f[0], s[0])
			}
			for i, k := range []string{"AllGather", "ReduceScatter"} {
				if s[i+2] > 64<<10 {
					t.Errorf("slow network: hierarchical %s from %d bytes, want 64 KiB or less", k, s[i+2])
				}
			}
		})
	}
	// Blocked, the flat tree crosses the network once per host, as
	// BroadcastHier does, and keeps on the network while the host
	// spreads the last piece: flat; interleaved, it crosses twice.
	if s, _ := algo.HierCrossovers([]int{0, 0, 1, 1}, slow); s[1] != math.MaxInt {
		t.Errorf("blocked: hierarchical Broadcast from %d bytes, want never", s[1])
	}
	if s, _ := algo.HierCrossovers([]int{0, 1, 0, 1}, slow); s[1] > 4<<10 {
		t.Errorf("interleaved: hierarchical Broadcast from %d bytes, want 4 KiB or less", s[1])
	}
	for _, bad := range []algo.Costs{{}, {Intra: shm}, {Intra: shm, Inter: algo.LinkCost{Alpha: math.NaN(), Beta: 1}}, {Intra: shm, Inter: algo.LinkCost{Beta: math.Inf(1)}}} {
		if s, ok := algo.HierCrossovers([]int{0, 0, 1, 1}, bad); ok || s != [len(algo.HierKinds)]int{algo.HierMinBytes, algo.HierMinBytes, algo.HierMinBytes, algo.HierMinBytes} {
			t.Errorf("%+v: %v %v, want the fixed threshold", bad, s, ok)
		}
	}
}

// TestTuningMessage: what rank 0 broadcasts decodes to what it encoded,
// "never" (math.MaxInt) included.
func TestTuningMessage(t *testing.T) {
	in := algo.Tuning{Costs: algo.Costs{Intra: algo.LinkCost{Alpha: 1.5e-6, Beta: 1 / 3.1e9}, Inter: algo.LinkCost{Alpha: 105e-6, Beta: 1 / 118e6}},
		HierMin: [len(algo.HierKinds)]int{16 << 10, math.MaxInt, 64, 1 << 30}}
	b := in.Encode()
	if out := algo.DecodeTuning(b[:]); out != in {
		t.Errorf("decoded %+v, want %+v", out, in)
	}
	if s := sizeString(16 << 10); s != "16 KiB" {
		t.Errorf("sizeString: %q", s)
	}
	if s := rateString(in.Costs.Inter) + ", " + latencyString(in.Costs.Inter); s != "118 MB/s, 105 µs" {
		t.Errorf("rateString, latencyString: %q", s)
	}
}
