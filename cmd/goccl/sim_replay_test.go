package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/ranktest"
	"github.com/goccl/goccl/sim"
)

// TestSimReplayGocclTrace records a real run of 2 ranks (GOCCL_TRACE_FILE:
// 3 steps of 2 ms of "compute" then an AllReduce of 256 KiB), replays it on
// a DGX H100, converts it to Chakra ET files and replays those: both
// replays agree, and each rank's time is at least its compute plus its
// communication, which run one after the other.
func TestSimReplayGocclTrace(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("GOCCL_TRACE_FILE", filepath.Join(dir, "trace-%r.json"))
	ranktest.Run(t, 2, 30*time.Second, func(ctx context.Context, c *goccl.Comm) error {
		x := make([]float32, 64<<10)
		for range 3 {
			time.Sleep(2 * time.Millisecond)
			if err := goccl.AllReduce(ctx, c, x, x, len(x), goccl.Sum); err != nil {
				return err
			}
		}
		return nil
	})
	et := filepath.Join(dir, "et")
	perfetto := filepath.Join(dir, "replay.json")
	fromTrace := simReplayRun(t, "--goccl-trace", filepath.Join(dir, "trace-*.json"), "-t", "dgx-h100", "--json",
		"--trace", perfetto, "--write-chakra", et)
	// The run's operations: the two Barriers of ranktest's setup (0 and 1
	// bytes as recorded; all_reduce's latency) and the 3 AllReduces.
	comm := 0.0
	for _, b := range []int64{0, 1, 256 << 10, 256 << 10, 256 << 10} {
		ar, err := mustPreset(t).Collective(sim.Collective{Kind: "all_reduce", Bytes: b, Ranks: 2})
		if err != nil {
			t.Fatal(err)
		}
		comm += ar.TimeUs
	}
	for _, r := range fromTrace.Ranks {
		if r.ComputeUs < 3*2000 || math.Abs(r.CommUs-comm) > 1e-6 || r.EndUs < r.ComputeUs+r.CommUs-1e-6 {
			t.Errorf("rank %d: %+v; want compute ≥ 6000 µs, comm %g µs, end ≥ their sum", r.Rank, r, comm)
		}
	}
	fromChakra := simReplayRun(t, "--chakra", filepath.Join(et, "et.*.et"), "-t", "dgx-h100", "--json")
	// Chakra holds whole µs: each of the ≤ 5 compute gaps per rank moves by 0.5 µs at most.
	if d := math.Abs(fromChakra.TotalUs - fromTrace.TotalUs); d > 5 {
		t.Errorf("replay of the Chakra files %g µs, of the goccl trace %g µs", fromChakra.TotalUs, fromTrace.TotalUs)
	}
	// On the namespace cluster's topology with its calibration: the
	// collectives at the calibrated costs.
	calFile := "../../sim/testdata/netns-calibration.json"
	onNetns := simReplayRun(t, "--goccl-trace", filepath.Join(dir, "trace-*.json"), "-t", "goccl-netns", "--calibration", calFile, "--json")
	netns, _ := sim.Preset("goccl-netns")
	cal, err := simLoadCalibration(calFile)
	if err != nil {
		t.Fatal(err)
	}
	if netns, err = netns.Apply(cal); err != nil {
		t.Fatal(err)
	}
	comm = 0
	for _, b := range []int64{0, 1, 256 << 10, 256 << 10, 256 << 10} {
		ar, err := netns.Collective(sim.Collective{Kind: "all_reduce", Bytes: b, Ranks: 2})
		if err != nil {
			t.Fatal(err)
		}
		comm += ar.TimeUs
	}
	if r := onNetns.Ranks[0]; math.Abs(r.CommUs-comm) > 1e-6 {
		t.Errorf("calibrated goccl-netns: comm %g µs, want %g", r.CommUs, comm)
	}
	var tr struct{ TraceEvents []map[string]any }
	if b, err := os.ReadFile(perfetto); err != nil || json.Unmarshal(b, &tr) != nil || len(tr.TraceEvents) == 0 {
		t.Errorf("--trace %s: %v, %d events", perfetto, err, len(tr.TraceEvents))
	}
}

func mustPreset(t *testing.T) *sim.Topology {
	topo, err := sim.Preset("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func simReplayRun(t *testing.T, args ...string) sim.ReplayResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := cli(append([]string{"sim", "replay"}, args...), &stdout, &stderr); code != 0 {
		t.Fatalf("sim replay %v: exit %d: %s", args, code, stderr.String())
	}
	var res sim.ReplayResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("sim replay --json: %v\n%s", err, stdout.String())
	}
	return res
}

func TestSimReplayUsage(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "et.x.et"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "bad.0.et"), []byte{0x05, 0x01}, 0o644)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "give one of --chakra"},
		{[]string{"--chakra", "a", "--goccl-trace", "b"}, 2, "give one of"},
		{[]string{"--chakra", "a", "--write-chakra", dir}, 2, "needs --goccl-trace"},
		{[]string{"--chakra", filepath.Join(dir, "none*")}, 2, "no such files"},
		{[]string{"--chakra", filepath.Join(dir, "et.*.et")}, 2, "last number"},
		{[]string{"--chakra", filepath.Join(dir, "bad.*.et")}, 2, "offset 0"},
		{[]string{"--goccl-trace", filepath.Join(dir, "et.x.et")}, 2, "--goccl-trace"},
	} {
		var stdout, stderr bytes.Buffer
		code := cli(append([]string{"sim", "replay"}, c.args...), &stdout, &stderr)
		if code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, stderr.String(), c.code, c.want)
		}
	}
}
