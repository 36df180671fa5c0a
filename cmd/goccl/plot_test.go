package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlot: goccl plot draws every table of nccl-tests-format files as a
// curve into a PNG (or SVG) image, and refuses bad input with a message.
func TestPlot(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "busbw.png")
	var stdout, stderr bytes.Buffer
	in := filepath.Join("testdata", "nccl-tests-lines.txt")
	if code := cli([]string{"plot", "-o", out, in + "=nccl-tests", in}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil || cfg.Width < 400 || cfg.Height < 200 {
		t.Fatalf("%s: %v, %dx%d", out, err, cfg.Width, cfg.Height)
	}
	if !strings.Contains(stderr.String(), "6 curve(s)") { // 3 tables, twice
		t.Errorf("stderr: %q", stderr.String())
	}
	svg := filepath.Join(dir, "t.svg")
	stderr.Reset()
	if code := cli([]string{"plot", "-y", "time", "-o", svg, in}, &stdout, &stderr); code != 0 {
		t.Fatalf("-y time, svg: exit %d: %s", code, stderr.String())
	}
	if b, _ := os.ReadFile(svg); !bytes.Contains(b, []byte("<svg")) || !bytes.Contains(b, []byte("time (µs)")) {
		t.Errorf("%s is not the SVG plot of times", svg)
	}
	empty := filepath.Join(dir, "empty.txt")
	os.WriteFile(empty, []byte("no table here\n"), 0o644)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"plot"}, 2, "no input files"},
		{[]string{"plot", "-y", "speed", in}, 2, `-y "speed"`},
		{[]string{"plot", "-o", filepath.Join(dir, "x.png"), filepath.Join(dir, "missing.txt")}, 1, "missing.txt"},
		{[]string{"plot", "-o", filepath.Join(dir, "x.png"), empty}, 1, "no nccl-tests result table"},
	} {
		stderr.Reset()
		if code := cli(c.args, &stdout, &stderr); code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%q: exit %d, %q; want %d and %q", c.args, code, stderr.String(), c.code, c.want)
		}
	}
}

// TestPerfPlot: goccl perf -plot draws rank 0's table.
func TestPerfPlot(t *testing.T) {
	out := filepath.Join(t.TempDir(), "busbw.png")
	var stdout, stderr bytes.Buffer
	if code := cli([]string{"perf", "all_reduce", "-b", "8", "-e", "64K", "-f", "8", "-n", "2", "-w", "1", "-plot", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatalf("no plot: %v (stderr %q)", err, stderr.String())
	}
	defer f.Close()
	if _, err := png.DecodeConfig(f); err != nil {
		t.Errorf("%s: %v", out, err)
	}
}
