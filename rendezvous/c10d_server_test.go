package rendezvous

import (
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

func startC10dServer(t *testing.T) *C10dServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := ServeC10d(ln)
	t.Cleanup(func() { s.Close() })
	return s
}

// TestC10dServerConformance: the store suite through C10dStore against
// goccl's own c10d server, which the client's probe finds speaking 2.x.
func TestC10dServerConformance(t *testing.T) {
	srv := startC10dServer(t)
	n := 0
	runConformance(t, func(t *testing.T) opener {
		n++
		prefix := "t" + strconv.Itoa(n) + "/"
		return func(t *testing.T) Store {
			s, err := DialC10d(testCtx(t), srv.Addr(), prefix)
			if err != nil {
				t.Fatal(err)
			}
			if s.version != c10dVersion2 {
				t.Fatalf("version %d, want 2", s.version)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
	})
}

// TestC10dServerTorchClient: PyTorch's own TCPStore client (torch 1.13 here:
// the 1.x numbering) uses goccl's server: set, get, add, wait,
// compare_set, num_keys and delete_key, from two processes at once (CHECK
// is served to C10dStore, in TestC10dServerConformance).
func TestC10dServerTorchClient(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import torch.distributed").Run(); err != nil {
		t.Skipf("/usr/bin/python3 cannot import torch.distributed (Debian python3-torch): %v", err)
	}
	srv := startC10dServer(t)
	_, port, _ := net.SplitHostPort(srv.Addr())
	script := `
import sys, datetime
import torch.distributed as d
r = int(sys.argv[2])
s = d.TCPStore("127.0.0.1", int(sys.argv[1]), 2, False, datetime.timedelta(seconds=30))
s.set("k%d" % r, "v%d" % r)
s.wait(["k0", "k1"])
assert s.get("k%d" % (1 - r)) == b"v%d" % (1 - r)
s.add("n", 5)
s.wait(["k0"])
if r == 0:
    assert s.compare_set("cas", "", "x") == b"x"
    assert s.compare_set("cas", "y", "z") == b"x"
    assert s.compare_set("cas", "x", "z") == b"z"
    s.set("r0done", "1")
else:
    s.wait(["r0done"])
    assert s.get("cas") == b"z"
    assert s.delete_key("cas")
    assert not s.delete_key("cas")
    s.set("r1done", "1")
s.wait(["r0done", "r1done"])
assert s.num_keys() >= 4
print("ok", r, int(s.add("n", 0)))
`
	outs := make([]string, 2)
	errs := make(chan error, 2)
	for r := range 2 {
		go func() {
			out, err := exec.Command("/usr/bin/python3", "-c", script, port, strconv.Itoa(r)).CombinedOutput()
			outs[r] = string(out)
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("a torch client failed: %v", err)
		}
	}
	for r, out := range outs {
		if !strings.Contains(out, "ok "+strconv.Itoa(r)+" 10") {
			t.Errorf("rank %d's torch client printed:\n%s", r, out)
		}
	}
}
