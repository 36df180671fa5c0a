package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/rendezvous"
)

// restartHelper is the rank program of the restart tests. Every rank
// prints what the launcher told it about the store and joining. Rank
// LAUNCH_TEST_VICTIM fails once, as LAUNCH_TEST_HOW says (exit: status 3,
// kill: SIGKILL); its replacement (GOCCL_JOIN=1) writes LAUNCH_TEST_DIR/joined
// and exits 0, or with LAUNCH_TEST_REPLACEMENT_FAILS fails with status 5
// and writes nothing. The other ranks exit 0 once the file is there (4
// after 30 s without it).
func restartHelper(rank int) int {
	victim, _ := strconv.Atoi(os.Getenv("LAUNCH_TEST_VICTIM"))
	joined := filepath.Join(os.Getenv("LAUNCH_TEST_DIR"), "joined")
	join := os.Getenv(config.Join.Name)
	fmt.Printf("started %s=%q %s=%q\n", config.Join.Name, join, config.StoreServed.Name, os.Getenv(config.StoreServed.Name))
	switch {
	case join == "1":
		if os.Getenv("LAUNCH_TEST_REPLACEMENT_FAILS") != "" {
			return 5
		}
		os.WriteFile(joined+".tmp", nil, 0o600)
		os.Rename(joined+".tmp", joined)
		return 0
	case rank == victim:
		time.Sleep(50 * time.Millisecond)
		if os.Getenv("LAUNCH_TEST_HOW") == "kill" {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		return 3
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(joined); err == nil {
			return 0
		}
	}
	return 4
}

// storeHelper is the rank program of the store tests: every rank dials
// the store at GOCCL_STORE_ADDR with the job token and its rank (a
// replacement, GOCCL_JOIN=1, without a rank). Rank 0 sets a key and dies
// (SIGKILL); the others must learn of rank 0's loss from the store, still
// read rank 0's key, and wait for the replacement to set "joined".
func storeHelper(rank int) int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	joining := os.Getenv(config.Join.Name) == "1"
	opts := []rendezvous.Option{rendezvous.WithToken([]byte(os.Getenv(EnvJobToken)))}
	if !joining {
		opts = append(opts, rendezvous.WithRank(rank))
	}
	s, err := rendezvous.DialTCP(ctx, os.Getenv(EnvStoreAddr), opts...)
	if err != nil {
		fmt.Println("ERR dial:", err)
		return 1
	}
	switch {
	case joining:
		err = s.Set(ctx, "joined", []byte("yes"))
		fmt.Println("replacement: set joined:", err)
	case rank == 0:
		if err := s.Set(ctx, "from0", []byte("hello")); err != nil {
			fmt.Println("ERR set:", err)
			return 1
		}
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	default:
		_, err := s.Get(ctx, "never")
		var lost *rendezvous.RankLostError
		if !errors.As(err, &lost) || lost.Rank != 0 {
			fmt.Println("ERR want rank 0 lost, got:", err)
			return 1
		}
		v, err := s.Get(ctx, "from0")
		fmt.Printf("rank 0 lost; from0=%q (%v)\n", v, err)
		if err = s.Wait(ctx, "joined"); err != nil {
			fmt.Println("ERR waiting for the replacement:", err)
			return 1
		}
		fmt.Println("replacement joined")
	}
	s.Close()
	if err != nil {
		return 1
	}
	return 0
}

// restartConfig is helperConfig for restartHelper: np ranks, victim
// failing as how, max restarts.
func restartConfig(t *testing.T, np, victim int, how string, max int) (Config, *syncBuffer, *syncBuffer) {
	cfg, out, errb := helperConfig(t, np, "restart")
	cfg.Env = append(cfg.Env, "LAUNCH_TEST_DIR="+t.TempDir(), "LAUNCH_TEST_VICTIM="+strconv.Itoa(victim), "LAUNCH_TEST_HOW="+how)
	cfg.MaxRestarts = max
	cfg.Grace = time.Second
	return cfg, out, errb
}

// TestMaxRestartsReplaces: with MaxRestarts 1, a rank that fails (a
// status, or SIGKILL) does not end the job: the launcher says so on stderr
// and starts a replacement under the same label, with GOCCL_JOIN=1 and
// GOCCL_RANK kept; every rank is told the launcher serves the store; the
// job ends with nil once every rank exits 0.
func TestMaxRestartsReplaces(t *testing.T) {
	for _, tc := range []struct{ how, what string }{
		{"exit", "exited with status 3"},
		{"kill", "killed by signal: killed"},
	} {
		t.Run(tc.how, func(t *testing.T) {
			cfg, out, errb := restartConfig(t, 3, 1, tc.how, 1)
			if err := Run(context.Background(), cfg); err != nil {
				t.Fatalf("Run: %v\nstdout:\n%s\nstderr:\n%s", err, out, errb)
			}
			started := regexp.MustCompile(`(?m)^\[(\d)\] started GOCCL_JOIN="(\d?)" GOCCL_STORE_SERVED="(\w*)"$`).FindAllStringSubmatch(out.String(), -1)
			joins := 0
			for _, m := range started {
				if m[3] != "launcher" {
					t.Errorf("rank %s: GOCCL_STORE_SERVED=%q, want launcher", m[1], m[3])
				}
				if m[2] == "1" {
					joins++
					if m[1] != "1" {
						t.Errorf("a replacement labelled [%s], want [1]", m[1])
					}
				}
			}
			if len(started) != 4 || joins != 1 {
				t.Errorf("%d processes started, %d with GOCCL_JOIN=1; want 4 and 1:\n%s", len(started), joins, out)
			}
			line := regexp.MustCompile(`(?m)^goccl run: rank 1 \(pid \d+\) ` + tc.what + `; starting a replacement that joins the job \(restart 1 of 1\)$`)
			if !line.MatchString(errb.String()) {
				t.Errorf("stderr lacks the restart line:\n%s", errb)
			}
		})
	}
}

// TestMaxRestartsZero: without restarts the first failure ends the job as
// always, and rank 0 serves the store (no GOCCL_STORE_SERVED).
func TestMaxRestartsZero(t *testing.T) {
	cfg, out, errb := restartConfig(t, 3, 1, "exit", 0)
	err := Run(context.Background(), cfg)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Rank != 1 || ee.Status != 3 || ee.Stopped != 2 {
		t.Fatalf("Run = %v, want rank 1's status 3, 2 stopped\nstdout:\n%s\nstderr:\n%s", err, out, errb)
	}
	if want := fmt.Sprintf("rank 1 (pid %d) exited with status 3; stopped the other 2 ranks", ee.Pid); err.Error() != want {
		t.Errorf("Error() = %q, want %q", err, want)
	}
	if strings.Contains(errb.String(), "replacement") || strings.Contains(out.String(), `GOCCL_JOIN="1"`) {
		t.Errorf("a replacement was started:\n%s\n%s", out, errb)
	}
	if n := strings.Count(out.String(), `GOCCL_STORE_SERVED=""`); n != 3 {
		t.Errorf("%d ranks without GOCCL_STORE_SERVED, want 3:\n%s", n, out)
	}
}

// TestMaxRestartsSpent: once the restarts are spent (the replacement
// fails too), the next failure ends the job as without them, and the
// error says the restarts were spent.
func TestMaxRestartsSpent(t *testing.T) {
	cfg, out, errb := restartConfig(t, 3, 1, "kill", 1)
	cfg.Env = append(cfg.Env, "LAUNCH_TEST_REPLACEMENT_FAILS=1")
	err := Run(context.Background(), cfg)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Rank != 1 || ee.Status != 5 || ee.Stopped != 2 {
		t.Fatalf("Run = %v, want the replacement's status 5, 2 stopped\nstdout:\n%s\nstderr:\n%s", err, out, errb)
	}
	if want := fmt.Sprintf("rank 1 (pid %d) exited with status 5 with no restart left (1 of 1 used); stopped the other 2 ranks", ee.Pid); err.Error() != want {
		t.Errorf("Error() = %q, want %q", err, want)
	}
	if n := strings.Count(errb.String(), "starting a replacement"); n != 1 {
		t.Errorf("%d restart lines, want 1:\n%s", n, errb)
	}
}

// TestLauncherStoreOutlivesRankZero: with MaxRestarts the launcher serves
// the store: when rank 0 dies, the others learn it from the store (rank 0
// dialed it as a client with its rank), still read what rank 0 stored,
// and meet rank 0's replacement there.
func TestLauncherStoreOutlivesRankZero(t *testing.T) {
	cfg, out, errb := helperConfig(t, 3, "store")
	cfg.MaxRestarts = 1
	if err := Run(context.Background(), cfg); err != nil {
		t.Fatalf("Run: %v\nstdout:\n%s\nstderr:\n%s", err, out, errb)
	}
	for _, want := range []string{"[1] rank 0 lost; from0=\"hello\" (<nil>)\n", "[2] rank 0 lost; from0=\"hello\" (<nil>)\n",
		"[1] replacement joined\n", "[2] replacement joined\n", "[0] replacement: set joined: <nil>\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
}

// TestRunHostsMaxRestarts: on several hosts, the agent of the failed
// rank's host asks the launcher, which keeps the job's count: the first
// failure is replaced on its host (the line names the host), and the
// store that the agent of rank 0's host serves outlives rank 0.
func TestRunHostsMaxRestarts(t *testing.T) {
	t.Run("restart", func(t *testing.T) {
		cfg, out, errb := hostsConfig(t, 3, "restart", Host{"nodeA", 2}, Host{"nodeB", 1})
		cfg.Env = append(cfg.Env, "LAUNCH_TEST_DIR="+t.TempDir(), "LAUNCH_TEST_VICTIM=2", "LAUNCH_TEST_HOW=kill")
		cfg.MaxRestarts = 1
		if err := Run(context.Background(), cfg); err != nil {
			t.Fatalf("Run: %v\nstdout:\n%s\nstderr:\n%s", err, out, errb)
		}
		if !strings.Contains(out.String(), `[2] started GOCCL_JOIN="1" GOCCL_STORE_SERVED="launcher"`) {
			t.Errorf("no replacement of rank 2:\n%s", out)
		}
		line := regexp.MustCompile(`(?m)^goccl run: rank 2 \(pid \d+ on nodeB\) killed by signal: killed; starting a replacement that joins the job \(restart 1 of 1\)$`)
		if !line.MatchString(errb.String()) {
			t.Errorf("stderr lacks the restart line:\n%s", errb)
		}
	})
	t.Run("spent", func(t *testing.T) {
		cfg, out, errb := hostsConfig(t, 3, "restart", Host{"nodeA", 2}, Host{"nodeB", 1})
		cfg.Env = append(cfg.Env, "LAUNCH_TEST_DIR="+t.TempDir(), "LAUNCH_TEST_VICTIM=2", "LAUNCH_TEST_HOW=exit", "LAUNCH_TEST_REPLACEMENT_FAILS=1")
		cfg.MaxRestarts = 1
		err := Run(context.Background(), cfg)
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Rank != 2 || ee.Status != 5 || ee.Host != "nodeB" || !strings.Contains(err.Error(), "with no restart left (1 of 1 used)") {
			t.Fatalf("Run = %v, want rank 2's replacement's status 5, restarts spent\nstdout:\n%s\nstderr:\n%s", err, out, errb)
		}
	})
	t.Run("store", func(t *testing.T) {
		cfg, out, errb := hostsConfig(t, 3, "store", Host{"nodeA", 1}, Host{"nodeB", 2})
		cfg.MaxRestarts = 1
		if err := Run(context.Background(), cfg); err != nil {
			t.Fatalf("Run: %v\nstdout:\n%s\nstderr:\n%s", err, out, errb)
		}
		for _, want := range []string{"[1] replacement joined\n", "[2] replacement joined\n", "[0] replacement: set joined: <nil>\n"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("stdout lacks %q:\n%s", want, out)
			}
		}
	})
}
