package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/goccl/goccl/internal/launch"
)

var elasticBuild struct {
	once sync.Once
	exe  string
	err  error
	out  []byte
}

// removeElasticExe removes what elasticExe built (TestMain calls it).
func removeElasticExe() {
	if elasticBuild.exe != "" {
		os.RemoveAll(filepath.Dir(elasticBuild.exe))
	}
}

// elasticExe builds internal/launch/testdata/elastic once per test binary.
func elasticExe(t *testing.T) string {
	t.Helper()
	elasticBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "goccl-elastic-")
		if err != nil {
			elasticBuild.err = err
			return
		}
		elasticBuild.exe = filepath.Join(dir, "elastic")
		cmd := exec.Command("go", "build", "-o", elasticBuild.exe, "../../internal/launch/testdata/elastic")
		elasticBuild.out, elasticBuild.err = cmd.CombinedOutput()
	})
	if elasticBuild.err != nil {
		t.Fatalf("building the elastic program: %v\n%s", elasticBuild.err, elasticBuild.out)
	}
	return elasticBuild.exe
}

// TestRunMaxRestartsElastic: goccl run -np 3 --max-restarts 1 of real
// goccl ranks, one of which SIGKILLs itself mid-loop (rank 0, whose death
// would end the store without --max-restarts, and rank 2; over shared
// memory and over TCP): the survivors
// shrink, goccl run starts a replacement that joins, they grow back to 3,
// and every rank, the replacement included, ends with the same sum.
func TestRunMaxRestartsElastic(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	exe := elasticExe(t)
	for _, tc := range []struct {
		victim int
		shmOff string
	}{{0, "0"}, {0, "1"}, {2, "0"}} {
		victim := tc.victim
		t.Run("kill rank "+strconv.Itoa(victim)+"/shm_disable="+tc.shmOff, func(t *testing.T) {
			t.Setenv("GOCCL_SHM_DISABLE", tc.shmOff)
			stdout, stderr, code := runGoccl(t, "run", "-np", "3", "--max-restarts", "1", exe,
				"-kill-rank", strconv.Itoa(victim), "-kill-at-step", "3", "-timeout", "60s")
			if code != 0 {
				t.Fatalf("exit code %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			finals := regexp.MustCompile(`(?m)^\[(\d)\] final (\d+) (\S+)$`).FindAllStringSubmatch(stdout, -1)
			seen := map[string]int{}
			for _, m := range finals {
				seen[m[1]]++
				if m[2] != "3" || m[3] != "108" {
					t.Errorf("rank %s ended with %s ranks and sum %s, want 3 and 108", m[1], m[2], m[3])
				}
			}
			// The replacement prints under the failed rank's label: one
			// final line per label.
			if len(finals) != 3 || len(seen) != 3 {
				t.Errorf("final lines %q, want one per rank", finals)
			}
			if want := "[" + strconv.Itoa(victim) + "] replacing rank " + strconv.Itoa(victim) + ": joining"; !strings.Contains(stdout, want) {
				t.Errorf("stdout lacks %q", want)
			}
			restart := regexp.MustCompile(`goccl run: rank ` + strconv.Itoa(victim) + ` \(pid \d+\) killed by signal: killed; starting a replacement that joins the job \(restart 1 of 1\)`)
			if !restart.MatchString(stderr) {
				t.Errorf("stderr lacks the restart line")
			}
			if t.Failed() {
				t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
			}
		})
	}
}

// TestRunNodesMaxRestarts: one goccl run per node (--nnodes 2, both on
// this host) with --max-restarts 1: node 0's goccl run serves the store,
// so that when rank 0 dies node 0 replaces it and the job of 4 ranks
// recovers.
func TestRunNodesMaxRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	exe := elasticExe(t)
	port, err := launch.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		stdout, stderr string
		code           int
	}
	results := make(chan result, 2)
	for node := range 2 {
		go func() {
			var o, e bytes.Buffer
			code := runGocclOn(t, []string{"GOCCL_JOB_TOKEN=nodes-elastic-secret"}, &o, &e, "run", "--nnodes", "2", "--node-rank", strconv.Itoa(node),
				"--master-addr", "127.0.0.1", "--master-port", strconv.Itoa(port), "--max-restarts", "1", "-n", "2",
				exe, "-kill-rank", "0", "-kill-at-step", "3", "-timeout", "60s")
			results <- result{o.String(), e.String(), code}
		}()
	}
	var stdout, stderr string
	for range 2 {
		r := <-results
		stdout, stderr = stdout+r.stdout, stderr+r.stderr
		if r.code != 0 {
			t.Errorf("a node's goccl run exited with %d", r.code)
		}
	}
	if n := strings.Count(stdout, "] final 4 144\n"); n != 4 {
		t.Errorf("%d ranks ended with 4 ranks and sum 144, want 4", n)
	}
	for _, want := range []string{"the store node 0's goccl run serves at 127.0.0.1:", "goccl run: rank 0 (pid "} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
}
