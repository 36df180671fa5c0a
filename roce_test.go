package goccl_test

import (
	"strings"
	"testing"
)

// TestRoCEFaults: the collective matrix at 3 ranks over RoCE links whose
// devices drop, duplicate, reorder and corrupt 1 % of their packets: every
// result right (the queue pairs resend what was lost or damaged).
func TestRoCEFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	outs := spawn(t, 3, "matrix", "GOCCL_SHM_DISABLE=1", "GOCCL_NET=roce", "GOCCL_TEST_ROCE_FAULTS=1",
		"GOCCL_IB_TIMEOUT=14", "GOCCL_TEST_COUNTS=0,1,7,10003", "GOCCL_DEBUG=INFO")
	for r, out := range outs {
		if !strings.Contains(out, "operations checked") || !strings.Contains(out, "via NET/RoCE/v2") {
			t.Fatalf("rank %d:\n%s", r, out)
		}
	}
}

// TestRoCEFallback: GOCCL_NET=roce where no device can be opened (the
// interface GOCCL_IB_HCA names does not exist) warns, naming the rank and
// the reason, and the job runs over TCP.
func TestRoCEFallback(t *testing.T) {
	outs := spawn(t, 2, "matrix", "GOCCL_SHM_DISABLE=1", "GOCCL_NET=roce", "GOCCL_IB_HCA==nosuchif0",
		"GOCCL_TEST_COUNTS=0,7", "GOCCL_DEBUG=INFO")
	for r, out := range outs {
		if !strings.Contains(out, "operations checked") || !strings.Contains(out, "via tcp") ||
			!strings.Contains(out, "GOCCL_NET=roce: no RoCE device for rank") || !strings.Contains(out, "nosuchif0") {
			t.Fatalf("rank %d:\n%s", r, out)
		}
	}
}
