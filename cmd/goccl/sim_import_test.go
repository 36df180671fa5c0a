package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSimTopologyXML: --topo takes a topology dump (XML, leading blank
// lines allowed) as well as JSON, named after the file.
func TestSimTopologyXML(t *testing.T) {
	b, err := os.ReadFile("../../topo/testdata/real-inputs/nccl-topo-dump-h100.txt")
	if err != nil {
		t.Fatal(err)
	}
	_, doc, _ := strings.Cut(string(b), "===== VERBATIM BELOW =====\n")
	file := filepath.Join(t.TempDir(), "h100vm.xml")
	os.WriteFile(file, []byte("\n  "+doc), 0o644)
	stdout, stderr, code := runGoccl(t, "sim", "collective", "--topo", file, "-b", "1G", "-e", "1G")
	if code != 0 || !strings.Contains(stdout, "topology: h100vm, 1 node(s) × 8 GPUs, nvswitch 450 GB/s per GPU (NVLS), 8 × 200 Gbit/s NICs") || !strings.Contains(stdout, "nvls/Simple") {
		t.Errorf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	os.WriteFile(file, []byte("<system><gpu sm='x'/></system>"), 0o644)
	if _, stderr, code = runGoccl(t, "sim", "collective", "--topo", file); code != 2 || !strings.Contains(stderr, "--topo "+file) {
		t.Errorf("bad XML: exit %d, %s", code, stderr)
	}
}
