package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRocePerfRateLog: write-bw --rate-log samples the client's progress
// and DCQCN counters; rate-plot reads the log back, prints a row for the
// flow with all of its bytes and draws the plot.
func TestRocePerfRateLog(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "flow.csv")
	rocePairWith(t, "write-bw", []string{"-s", "64K", "-n", "100", "-dev-port", "0", "--dcqcn", "1gbit"}, func(port string) []string {
		return []string{"roce", "write-bw", "127.0.0.1", "-s", "64K", "-n", "100", "-p", port, "--timeout=30s", "--dcqcn", "1gbit",
			"--rate-log", log, "--rate-interval", "1ms"}
	})
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	samples, err := readRateLog(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	last := samples[len(samples)-1]
	if samples[0].bytes != 0 || last.bytes != 100*64<<10 || last.rate <= 0 {
		t.Errorf("samples from %+v to %+v, want 0 to %d bytes and a DCQCN rate", samples[0], last, 100*64<<10)
	}
	png := filepath.Join(dir, "rate.png")
	var out, errb bytes.Buffer
	if st := cli([]string{"roce", "rate-plot", "-o", png, "--link", "1gbit", log + "=one", log + "=two"}, &out, &errb); st != 0 {
		t.Fatalf("rate-plot: status %d: %s", st, errb.String())
	}
	if !strings.Contains(out.String(), "| one | 6.6 |") || !strings.Contains(out.String(), "all 2 flows ran together") ||
		!strings.Contains(out.String(), "smallest share is 100 % of the largest") {
		t.Errorf("rate-plot's table:\n%s", out.String())
	}
	if fi, err := os.Stat(png); err != nil || fi.Size() == 0 {
		t.Errorf("plot: %v", err)
	}
}

// TestReadRateLogErrors: a log with a short line or no samples is refused.
func TestReadRateLogErrors(t *testing.T) {
	for _, in := range []string{"# x\n1,2,3\n", "# only comments\n", "1,2,3,4,5,6,7,8\n", "1,2,3,4,5,6,7,x\n2,3,4,5,6,7,8,9\n"} {
		if _, err := readRateLog(strings.NewReader(in)); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}
