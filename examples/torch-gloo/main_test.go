package main

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const python = "/usr/bin/python3"

// TestMixedTraining runs the example: this test is the Go rank 0, two
// train.py processes the PyTorch trainers. The Go rank's copy of the model
// must equal the trainers' bit for bit and classify the test set well.
func TestMixedTraining(t *testing.T) {
	if out, err := exec.Command(python, "-c", "import torch.distributed as d; assert d.is_gloo_available()").CombinedOutput(); err != nil {
		t.Skipf("skipped: %s cannot import torch with Gloo (Debian python3-torch): %v: %s", python, err, bytes.TrimSpace(out))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	for k, v := range map[string]string{"RANK": "0", "WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "GLOO_SOCKET_IFNAME": "lo"} {
		t.Setenv(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	outs := make([][]byte, 3)
	errs := make([]error, 3)
	for r := 1; r <= 2; r++ {
		cmd := exec.CommandContext(ctx, python, "train.py")
		cmd.Env = append(cmd.Environ(), "RANK="+strconv.Itoa(r))
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			outs[r], errs[r] = cmd.CombinedOutput()
		}(r)
	}
	var out bytes.Buffer
	cfg := config{epochs: 8, batch: 32, hidden: 32, lr: 0.2, seed: 1, timeout: time.Minute}
	err = run(ctx, cfg, &out)
	if err != nil {
		cancel()
	}
	wg.Wait()
	if err != nil {
		t.Fatalf("Go rank: %v\n%s\ntrainers:\n%s\n%s", err, out.String(), outs[1], outs[2])
	}
	for r := 1; r <= 2; r++ {
		if errs[r] != nil || !strings.Contains(string(outs[r]), "done") {
			t.Errorf("trainer rank %d: %v\n%s", r, errs[r], outs[r])
		}
	}
	text := out.String()
	if !strings.Contains(text, "largest difference between the Go copy and trainer rank 1's parameters: 0\n") {
		t.Errorf("the Go rank's model differs from the trainers':\n%s", text)
	}
	m := regexp.MustCompile(`test accuracy \(the Go rank's copy of the model\): ([0-9.]+)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no test accuracy:\n%s", text)
	}
	if acc, _ := strconv.ParseFloat(m[1], 64); acc < 0.9 {
		t.Errorf("test accuracy %.4f < 0.9 after 8 epochs:\n%s", acc, text)
	}
	t.Logf("\n%s", text)
}

func TestFlags(t *testing.T) {
	if _, err := parseFlags([]string{"-epochs", "0"}); err == nil {
		t.Error("-epochs 0 accepted")
	}
	if _, err := parseFlags([]string{"extra"}); err == nil {
		t.Error("an extra argument accepted")
	}
	c, err := parseFlags([]string{"-lr", "0.1", "-hidden", "16"})
	if err != nil || c.lr != 0.1 || c.hidden != 16 || c.epochs != 20 {
		t.Errorf("%+v %v", c, err)
	}
}
