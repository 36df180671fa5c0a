package main

import (
	"os"
	"strings"
	"testing"

	"github.com/goccl/goccl/internal/config"
)

// TestPerfSendRecvInPlace: goccl perf's in-place sendrecv passes one
// buffer as both halves; over the shared-memory ring (cross-memory attach
// off) the receive once wrote under the send's reads (the race detector's
// report, exit 66, in the race suite). SendRecv now sends a copy of an
// overlapping sendbuf.
func TestPerfSendRecvInPlace(t *testing.T) {
	exe, _ := os.Executable()
	stdout, stderr, code := runGoccl(t, "run", "-np", "2", "--env", config.ShmCMA.Name+"=0",
		exe, "perf", "sendrecv", "-b", "512K", "-e", "8M", "-f", "4", "-n", "5", "-w", "5")
	if code != 0 || !strings.Contains(stdout, "# Out of bounds values : 0 OK") {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
}
