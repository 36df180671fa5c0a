package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccl/goccl/internal/cluster"
	"github.com/goccl/goccl/internal/cluster/clustertest"
	"github.com/goccl/goccl/sim"
)

// TestSimCalibrate: goccl sim calibrate measures two ranks of this host
// (and, where namespaces can be made, two hosts of a cluster shaped to
// 1 Gbit/s) with goccl perf, fits each link, and validate --calibration
// applies the file to a goccl-netns row.
func TestSimCalibrate(t *testing.T) {
	args := []string{"sim", "calibrate", "-e", "32M", "-n", "5"}
	var c *cluster.Cluster
	if why := clustertest.Skip(); why == "" {
		c = clustertest.New(t, cluster.Config{Hosts: 2, Rate: 1e9})
		args = append(args, "--cluster", c.Name, "--state-dir", c.Config.StateDir)
	} else {
		t.Logf("intra-host only: %s", why)
	}
	stdout, stderr, code := runGoccl(t, args...)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	cal, err := sim.LoadCalibration(strings.NewReader(stdout))
	if err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	// 8 B to 32 MiB by ×4: 12 sizes (those from 1 MiB give the rate: with
	// 2 MiB alone two busy cores left it to noise).
	if cal.Intra == nil || len(cal.Intra.Points) != 12 || !strings.Contains(cal.Source, "logical CPUs") {
		t.Fatalf("calibration %+v", cal)
	}
	if c != nil {
		if cal.Inter == nil || len(cal.Inter.Points) != 12 || cal.Inter.RateGbps != 1 || !(cal.Inter.Efficiency > 0) {
			t.Fatalf("inter-host fit %+v", cal.Inter)
		}
	}
	file := filepath.Join(t.TempDir(), "cal.json")
	os.WriteFile(file, []byte(stdout), 0o644)
	csv := filepath.Join(t.TempDir(), "rows.csv")
	os.WriteFile(csv, []byte(strings.Join(sim.PublishedColumns, ",")+
		"\ngoccl-netns 100mbit,4,2,all_reduce float sum,default,1048576,time_us,100000,measured here\n"), 0o644)
	stdout, stderr, code = runGoccl(t, "sim", "validate", "--csv", csv, "--calibration", file, "--json")
	var rep sim.ValidationReport
	if err := json.Unmarshal([]byte(stdout), &rep); code != 0 || err != nil {
		t.Fatalf("exit %d, %v\n%s\n%s", code, err, stdout, stderr)
	}
	if r := rep.Rows[0]; r.Status != sim.StatusOK || !strings.Contains(r.Model, "calibrated") || !(r.Predicted > 0) {
		t.Errorf("row %+v", r)
	}
	_, stderr, code = runGoccl(t, "sim", "validate", "--csv", csv, "--calibration", csv)
	if code != 2 || !strings.Contains(stderr, "--calibration "+csv) {
		t.Errorf("a CSV as calibration: exit %d, %s", code, stderr)
	}
}
