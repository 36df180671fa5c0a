package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestPerfEveryCollective3Ranks runs `goccl perf C -np 3 -d all -o all` for
// every collective over the real library, sizes 8 B to 2 MiB (factor 8 to
// keep CI short; the full factor-2 sweep is the same code path),
// then 16 MiB in float32 sums (every type at that size cost most of the
// test, and the root package's matrix runs every type at 1000003
// elements), and requires #wrong 0 and no out-of-bounds writes, over
// shared memory and TCP.
func TestPerfEveryCollective3Ranks(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end sweep; the full suite runs it")
	}
	for _, shmOff := range []string{"0", "1"} {
		for _, coll := range []string{"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "sendrecv"} {
			t.Run(coll+"/shm_disable="+shmOff, func(t *testing.T) {
				t.Setenv("GOCCL_SHM_DISABLE", shmOff)
				sawMax := false
				for _, args := range [][]string{{"-b", "8", "-e", "2M", "-f", "8", "-d", "all", "-o", "all"}, {"-b", "16M", "-e", "16M", "-d", "float", "-o", "sum"}} {
					args = append([]string{"perf", coll, "-np", "3", "-n", "1", "-w", "0"}, args...)
					stdout, stderr, code := runGoccl(t, args...)
					if code != 0 {
						t.Fatalf("%v: exit code %d\nstdout:\n%s\nstderr:\n%s", args, code, stdout, stderr)
					}
					rows, tail := parseReport(t, stdout, 3)
					if len(rows) == 0 || tail[0] != "# Out of bounds values : 0 OK" {
						t.Fatalf("%v: %d rows, tail %q", args, len(rows), tail)
					}
					for _, r := range rows {
						if r.wrongOOP != "0" || (r.wrongIP != "0" && r.wrongIP != "N/A") {
							t.Errorf("%v: row %+v", args, r)
						}
						sawMax = sawMax || r.size > 15<<20 // 16 MiB, rounded to whole per-rank blocks
					}
				}
				if !sawMax {
					t.Errorf("no row near 16 MiB")
				}
			})
		}
	}
}

// TestPerfUnderMpirun: `mpirun -np 2 goccl perf all_reduce` runs as two ranks
// that find rank 0's store through the address file (no GOCCL_* variables).
func TestPerfUnderMpirun(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not installed (Debian openmpi-bin; .ci/run installs it)")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2",
		"-x", "GOCCL_CLI_TEST_MAIN=1", exe, "perf", "all_reduce", "-b", "8", "-e", "1M", "-f", "4")
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOCCL_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "GOCCL_CLI_TEST_MAIN=1")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("mpirun: %v\nstdout:\n%s\nstderr:\n%s", err, o.String(), e.String())
	}
	rows, tail := parseReport(t, o.String(), 2)
	if len(rows) != 9 || tail[0] != "# Out of bounds values : 0 OK" {
		t.Fatalf("%d rows, tail %q\n%s", len(rows), tail, o.String())
	}
	for _, r := range rows {
		if r.wrongOOP != "0" || r.wrongIP != "0" {
			t.Errorf("row %+v", r)
		}
	}
}
