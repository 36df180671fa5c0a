package nccllog

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// FuzzAnalyzeNCCLLog feeds arbitrary text to the analyser, seeded with the
// verbatim real logs and the synthetic cases, and checks that it never
// panics and that every report keeps its invariants.
func FuzzAnalyzeNCCLLog(f *testing.F) {
	for _, text := range logTestInputs(f) {
		f.Add(text)
	}
	f.Add("")
	f.Add("\r\n\x1b[0m[1,0]<stdout>: \n")
	f.Add("h:1:2 [0] NCCL INFO NET/IB : Using [0]x:1/RoCE [RO]; OOB lo:127.0.0.1<0>\n [1]y:2/IB\n")
	f.Fuzz(func(t *testing.T, text string) {
		rep, err := Analyze(strings.NewReader(text))
		if err != nil {
			t.Fatalf("error on an in-memory reader: %v", err)
		}
		switch rep.GDRDMA {
		case "on", "off", "partial", "unknown":
		default:
			t.Fatalf("gdrdma %q", rep.GDRDMA)
		}
		switch rep.NVLS.Available {
		case "yes", "no", "unknown":
		default:
			t.Fatalf("nvls available %q", rep.NVLS.Available)
		}
		switch rep.CollNet.Supported {
		case "yes", "no", "unknown":
		default:
			t.Fatalf("collnet supported %q", rep.CollNet.Supported)
		}
		if rep.IntraNode == nil || rep.Interfaces == nil || rep.HCAs == nil || rep.Hosts == nil || rep.Findings == nil || rep.Env == nil {
			t.Fatal("nil list or map in report")
		}
		if rep.NRanks < 0 || rep.NNodes < 0 || rep.Channels < 0 || len(rep.Interfaces) > logMaxItems || len(rep.HCAs) > logMaxItems || len(rep.Warnings) > logMaxWarnings {
			t.Fatalf("counts out of range: %d ranks, %d nodes, %d channels, %d ifs, %d HCAs", rep.NRanks, rep.NNodes, rep.Channels, len(rep.Interfaces), len(rep.HCAs))
		}
		for i, fd := range rep.Findings {
			if fd.Severity == "" || fd.Code == "" || fd.Message == "" {
				t.Fatalf("incomplete finding %+v", fd)
			}
			if i > 0 && rep.Findings[i-1].Severity.Rank() > fd.Severity.Rank() {
				t.Fatalf("findings not sorted: %v", logCodes(rep))
			}
		}
		if err := rep.WriteText(io.Discard); err != nil {
			t.Fatalf("WriteText: %v", err)
		}
		if _, err := json.Marshal(rep); err != nil {
			t.Fatalf("json.Marshal: %v", err)
		}
	})
}
