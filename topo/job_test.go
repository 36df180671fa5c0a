package topo

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/rendezvous"
	"github.com/goccl/goccl/topo/topotest"
)

// threeRanks detects the hosts of a 3-rank job: ranks 0 and 1 on the
// two-socket host (pinned to node 0 and node 1), rank 2 on the vm tree.
func threeRanks(t *testing.T) []*Host {
	t.Helper()
	two := twoSocket(t)
	vm := topotest.FakeRoot(t, filepath.Join("testdata", "vm"))
	var hosts []*Host
	for _, o := range []Options{
		{Root: two, Affinity: affinity(0, 1, 2, 3), NvidiaSMI: "-"},
		{Root: two, Affinity: affinity(4, 5, 6, 7), NvidiaSMI: "-"},
		{Root: vm, Affinity: affinity(0, 1), NvidiaSMI: "-"},
	} {
		h, err := Detect(o)
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, h)
	}
	return hosts
}

// TestGather: 3 goroutine ranks exchange their hosts through an in-memory
// store; every rank gets the same job, ranks grouped by host.
func TestGather(t *testing.T) {
	hosts := threeRanks(t)
	store := rendezvous.NewMemStore()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	jobs := make([]*Job, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			jobs[r], errs[r] = Gather(ctx, store, r, 3, hosts[r])
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	j := jobs[0]
	for r := 1; r < 3; r++ {
		if !reflect.DeepEqual(jobs[r], j) {
			t.Errorf("rank %d's job differs from rank 0's", r)
		}
	}
	if len(j.Hosts) != 2 || !reflect.DeepEqual(j.Hosts[0].Ranks, []int{0, 1}) || !reflect.DeepEqual(j.Hosts[1].Ranks, []int{2}) {
		t.Fatalf("hosts: %+v", j.Hosts)
	}
	if j.Hosts[0].Host.Hostname != "gpu-node-07" || j.Hosts[1].Host.Hostname != "worker-2" || j.Hosts[0].Host.Process != nil {
		t.Errorf("hosts %q %q, process %+v (want it moved to Ranks)", j.Hosts[0].Host.Hostname, j.Hosts[1].Host.Hostname, j.Hosts[0].Host.Process)
	}
	for r, want := range []struct {
		host int
		cpus string
		numa []int
	}{{0, "0-3", []int{0}}, {0, "4-7", []int{1}}, {1, "0-1", []int{0}}} {
		got := j.Ranks[r]
		if got.Rank != r || got.Host != want.host || got.Process == nil || got.Process.CPUs != want.cpus || !reflect.DeepEqual(got.Process.NUMA, want.numa) {
			t.Errorf("rank %d: %+v %+v, want host %d CPUs %s NUMA %v", r, got, got.Process, want.host, want.cpus, want.numa)
		}
	}
	if j.HostOf(2).Hostname != "worker-2" || j.HostOf(3) != nil || len(j.Missing()) != 0 {
		t.Errorf("HostOf(2) %q, HostOf(3) %v, missing %v", j.HostOf(2).Hostname, j.HostOf(3), j.Missing())
	}

	// JSON round trip.
	var jb bytes.Buffer
	if err := j.WriteJSON(&jb); err != nil {
		t.Fatal(err)
	}
	var back Job
	if err := json.Unmarshal(jb.Bytes(), &back); err != nil || !reflect.DeepEqual(&back, j) {
		t.Errorf("JSON round trip: %v\n%s", err, jb.String())
	}

	// XML: one NCCL <system> per host under <host>, a <rank> per rank.
	var xb bytes.Buffer
	if err := j.WriteXML(&xb); err != nil {
		t.Fatal(err)
	}
	top := parseXML(t, xb.String())
	if top.XMLName.Local != "goccl_topology" || top.attr("version") != "1" || top.attr("ranks") != "3" || top.attr("hosts") != "2" || len(top.Nodes) != 2 {
		t.Fatalf("job XML:\n%s", xb.String())
	}
	h0, h1 := top.Nodes[0], top.Nodes[1]
	if h0.XMLName.Local != "host" || h0.attr("hostname") != "gpu-node-07" || h0.attr("ranks") != "0-1" || h1.attr("ranks") != "2" ||
		h0.attr("id") != hosts[0].ID {
		t.Errorf("hosts: %+v %+v", h0.Attrs, h1.Attrs)
	}
	var names []string
	for _, n := range h0.Nodes {
		names = append(names, n.XMLName.Local)
	}
	if strings.Join(names, ",") != "rank,rank,system" {
		t.Errorf("host 0 holds %v, want rank,rank,system", names)
	}
	if r1 := h0.Nodes[1]; r1.attr("rank") != "1" || r1.attr("cpus") != "4-7" || r1.attr("numa") != "1" || r1.attr("pid") == "" {
		t.Errorf("rank 1: %+v", r1.Attrs)
	}
	// Each <system> cut out alone is the host's own dump.
	var single bytes.Buffer
	if err := j.Hosts[1].Host.WriteXML(&single); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(xb.String(), indent(single.String(), "    ")) {
		t.Errorf("host 1's <system> in the job differs from its own dump:\n%s\nown:\n%s", xb.String(), single.String())
	}
	if sys := h1.Nodes[len(h1.Nodes)-1]; sys.XMLName.Local != "system" || len(sys.all("net")) != 1 || sys.all("net")[0].n.attr("name") != "eth0" {
		t.Errorf("worker-2's system: %+v", sys)
	}
}

// indent puts prefix before every line of s.
func indent(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "")
}

// TestCollectMissing: Collect reads the ranks that published and does not
// wait for the others.
func TestCollectMissing(t *testing.T) {
	hosts := threeRanks(t)
	store := rendezvous.NewMemStore()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, r := range []int{0, 2} {
		if err := Publish(ctx, store, r, hosts[r]); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	j, err := Collect(ctx, store, 3)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Collect took %v", d)
	}
	if !reflect.DeepEqual(j.Missing(), []int{1}) || len(j.Hosts) != 2 || j.Ranks[1].Host != -1 || j.Ranks[2].Host != 1 {
		t.Fatalf("job %+v, missing %v", j, j.Missing())
	}
	var xb bytes.Buffer
	if err := j.WriteXML(&xb); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(xb.String(), `<missing ranks="1"/>`) {
		t.Errorf("no <missing>:\n%s", xb.String())
	}
	// A rank that publishes late is found by the next Collect.
	if err := Publish(ctx, store, 1, hosts[1]); err != nil {
		t.Fatal(err)
	}
	if j, err = Collect(ctx, store, 3); err != nil || len(j.Missing()) != 0 || !reflect.DeepEqual(j.Hosts[0].Ranks, []int{0, 1}) {
		t.Fatalf("after rank 1 published: %v, %+v", err, j)
	}
}

func TestGatherBadValue(t *testing.T) {
	store := rendezvous.NewMemStore()
	ctx := context.Background()
	store.Set(ctx, hostKey(1), []byte("{not json"))
	h := &Host{ID: "x"}
	if _, err := Gather(ctx, store, 0, 2, h); err == nil || !strings.Contains(err.Error(), "rank 1 published a bad host") {
		t.Errorf("err = %v", err)
	}
	if _, err := Gather(ctx, store, 2, 2, h); err == nil {
		t.Error("rank 2 of 2 accepted")
	}
}

func TestWriteFile(t *testing.T) {
	j := NewJob(threeRanks(t))
	dir := t.TempDir()
	for name, first := range map[string]string{"topo.xml": "<goccl_topology ", "topo.JSON": "{", "topo": "<goccl_topology "} {
		p := filepath.Join(dir, name)
		if err := j.WriteFile(p); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(p)
		if !strings.HasPrefix(string(b), first) {
			t.Errorf("%s starts %q", name, b[:min(len(b), 40)])
		}
	}
}
