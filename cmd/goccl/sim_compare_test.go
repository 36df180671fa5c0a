package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/goccl/goccl/sim"
)

// TestSimCompare: one NVL72 domain against nine DGX B200 nodes, 72 ranks
// each: the rows are sim's own predictions and the ratio is A over B.
func TestSimCompare(t *testing.T) {
	var out, errb bytes.Buffer
	if code := runSimCompare("goccl sim compare", []string{"nvl72", "dgx-b200@9", "-b", "1G", "-e", "1G"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	a, _ := sim.Preset("nvl72")
	b, _ := sim.Preset("dgx-b200")
	ra, err := a.Collective(sim.Collective{Kind: "all_reduce", Bytes: 1 << 30, Ranks: 72})
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.WithNodes(9).Collective(sim.Collective{Kind: "all_reduce", Bytes: 1 << 30, Ranks: 72})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%.4g", ra.TimeUs)
	last := strings.Fields(out.String()[strings.LastIndex(strings.TrimSpace(out.String()), "\n")+1:])
	if len(last) != 8 || last[1] != want || last[7] != fmt.Sprintf("%.3g", ra.TimeUs/rb.TimeUs) {
		t.Errorf("row %q, want A's time %s and ratio %.3g\n%s", last, want, ra.TimeUs/rb.TimeUs, out.String())
	}
	if !strings.Contains(out.String(), "# B: dgx-b200×9, 9 node(s) × 8 GPUs") {
		t.Errorf("no B header:\n%s", out.String())
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"nvl72"}, "want two topologies"},
		{[]string{"nvl72", "dgx-b200@0"}, "@0: want a node count"},
		{[]string{"nvl72", "nosuch"}, `no preset "nosuch"`},
		{[]string{"nvl72", "dgx-b200", "--ranks", "9"}, "--ranks 9: want 1 to 8"},
	} {
		errb.Reset()
		if code := runSimCompare("goccl sim compare", tc.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%q: exit %d, %s; want %q", tc.args, code, errb.String(), tc.want)
		}
	}
}
