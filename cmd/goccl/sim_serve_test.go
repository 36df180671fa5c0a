package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccl/goccl/sim"
)

// TestSimServeTable: the table has each quantity on its own line, and the
// figures are Serve's for the same configuration.
func TestSimServeTable(t *testing.T) {
	out, errOut, code := simCLI("sim", "serve", "--preset", "dgx-h100", "--model", simServeModel,
		"--prompt", "8192", "--output", "256", "--batch", "8", "--tp", "8", "--disaggregated", "--wire", "roce")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"# goccl sim serve: predicted by the closed-form model, not measured",
		"# model: Llama-3.1-70B, 69.5 B parameters, 320 KiB of KV cache per token",
		"# prompt 8192, output 256, batch 8, tp 8; disaggregated, KV cache over the NICs",
		"\nTTFT ", "\n  prefill ", "\n  KV transfer ", "\nTPOT ", "\ntokens/s ", "\ndecode tokens/s ",
		"\nKV bytes          21.47 GB", "\nKV transfer ", "(roce, 0.9804 of the line rate)", "\nKV share of TTFT  1.7 %",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	out, _, code = simCLI("sim", "serve", "--preset", "dgx-h100")
	if code != 0 || !strings.Contains(out, "colocated") || !strings.Contains(out, "KV share of TTFT  0.0 %") {
		t.Errorf("colocated (the defaults): exit %d\n%s", code, out)
	}
}

// TestSimServeJSON: --json carries the topology and Serve's result.
func TestSimServeJSON(t *testing.T) {
	args := []string{"sim", "serve", "-t", "dgx-h100", "--prompt", "4096", "--batch", "2", "--tp", "4",
		"--disaggregated", "--kv-path", "node", "--overlap", "--json"}
	out, errOut, code := simCLI(args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got struct {
		Args     []string        `json:"args"`
		Topology sim.Topology    `json:"topology"`
		Result   sim.ServeResult `json:"result"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	topo, _ := sim.Preset("dgx-h100")
	w, _ := sim.ParseWorkload(simServeModel)
	want, err := sim.Serve(topo, w.Model, sim.ServeOptions{Prompt: 4096, Output: 256, Batch: 2, TP: 4, Disaggregated: true,
		KVPath: sim.KVPathNode, Overlap: true, Wire: "ib", SetupUs: sim.DefaultKVSetupUs})
	if err != nil {
		t.Fatal(err)
	}
	r := got.Result
	if got.Topology.Name != "dgx-h100" || r.TTFTS != want.TTFTS || r.TPOTS != want.TPOTS || r.KVBytes != 2*4096*327680 ||
		r.Transfer == nil || r.Transfer.Path != sim.KVPathNode || r.Transfer.Seconds != want.Transfer.Seconds || r.KVShare != want.KVShare {
		t.Errorf("JSON %+v\nwant %+v", r, want)
	}
	for _, key := range []string{`"ttft_s"`, `"tpot_s"`, `"tokens_per_s"`, `"kv_bytes"`, `"kv_transfer"`, `"kv_share_of_ttft"`, `"mem_bytes_per_gpu"`} {
		if !strings.Contains(out, key) {
			t.Errorf("no %s in the JSON", key)
		}
	}
}

// TestSimServeErrors: bad input names the flag and its value.
func TestSimServeErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"name":"x"}`), 0o644)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--prompt", "0"}, 2, "--prompt 0: want 1 or more"},
		{[]string{"--batch", "-3"}, 2, "--batch -3"},
		{[]string{"--tp", "0"}, 2, "--tp 0"},
		{[]string{"--wire", "eth"}, 2, `--wire "eth": want one of ib, roce`},
		{[]string{"--disaggregated", "--kv-path", "pcie"}, 2, `--kv-path "pcie"`},
		{[]string{"--kv-path", "node"}, 2, "--kv-path node: only with --disaggregated"},
		{[]string{"--overlap"}, 2, "--overlap: only with --disaggregated"},
		{[]string{"--compute-eff", "2"}, 2, "--compute-eff 2: want a share in (0, 1]"},
		{[]string{"--nics", "-1"}, 2, "--nics -1"},
		{[]string{"--model", "Llama L80 bogus7"}, 2, `--model "Llama L80 bogus7"`},
		{[]string{"--preset", "dgx-z"}, 2, `no preset "dgx-z"`},
		{[]string{"--topology", bad}, 2, "--topo " + bad},
		{[]string{"--prompt", "abc"}, 2, "abc"},
		{[]string{"--tp", "16"}, 1, "tp = 16"},
		{[]string{"--prompt", "131072", "--batch", "64"}, 1, "exceed gpu.mem_GB = 80"},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
	} {
		_, errOut, code := simCLI(append([]string{"sim", "serve"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, errOut, c.code, c.want)
		}
	}
}
