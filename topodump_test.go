package goccl_test

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/rendezvous"
	"github.com/goccl/goccl/topo"
)

// TestTopoDumpFile: with GOCCL_TOPO_DUMP_FILE set, Init makes rank 0 write
// the job's topology: 3 goroutine ranks of this process, so one host.
func TestTopoDumpFile(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("GOCCL_TOPO_DUMP_FILE", filepath.Join(dir, "topo-%h.xml"))
	errs := goroutineRanks(t, 3, 30*time.Second, func(c *goccl.Comm) error { return c.Barrier(context.Background()) })
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	host, _ := os.Hostname()
	b, err := os.ReadFile(filepath.Join(dir, "topo-"+host+".xml"))
	if err != nil {
		t.Fatal(err)
	}
	var job struct {
		XMLName xml.Name
		Ranks   string `xml:"ranks,attr"`
		Hosts   []struct {
			Hostname string `xml:"hostname,attr"`
			ID       string `xml:"id,attr"`
			Ranks    string `xml:"ranks,attr"`
			Rank     []struct {
				Rank string `xml:"rank,attr"`
				Pid  int    `xml:"pid,attr"`
			} `xml:"rank"`
			System struct {
				Version string `xml:"version,attr"`
				CPUs    []struct {
					NUMA string `xml:"numaid,attr"`
				} `xml:"cpu"`
			} `xml:"system"`
		} `xml:"host"`
	}
	if err := xml.Unmarshal(b, &job); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if job.XMLName.Local != "goccl_topology" || job.Ranks != "3" || len(job.Hosts) != 1 {
		t.Fatalf("want one host with 3 ranks:\n%s", b)
	}
	h := job.Hosts[0]
	if h.Hostname != host || h.ID != topo.HostID("/") || h.Ranks != "0-2" || len(h.Rank) != 3 || h.Rank[2].Pid != os.Getpid() ||
		h.System.Version != "1" || len(h.System.CPUs) == 0 {
		t.Errorf("host %+v:\n%s", h, b)
	}
	if strings.Contains(string(b), "<missing") {
		t.Errorf("ranks missing:\n%s", b)
	}
}

// TestTopoDumpFileOneRank: a communicator of one rank writes its own host,
// as JSON for a .json name.
func TestTopoDumpFileOneRank(t *testing.T) {
	p := filepath.Join(t.TempDir(), "topo.json")
	t.Setenv("GOCCL_TOPO_DUMP_FILE", p)
	c, err := goccl.Init(context.Background(), goccl.WithRank(0), goccl.WithWorldSize(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var job topo.Job
	if err := json.Unmarshal(b, &job); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if len(job.Ranks) != 1 || len(job.Hosts) != 1 || job.Ranks[0].Process == nil || job.Ranks[0].Process.Pid != os.Getpid() {
		t.Errorf("job %+v", job)
	}
}

// TestNoTopoDumpFile: without the variable no rank publishes its host
// (the store's ready counters stay absent) and nothing is written.
func TestNoTopoDumpFile(t *testing.T) {
	for _, set := range []bool{false, true} {
		dir := t.TempDir()
		t.Chdir(dir)
		t.Setenv("GOCCL_TOPO_DUMP_FILE", "")
		if set {
			t.Setenv("GOCCL_TOPO_DUMP_FILE", "t.xml")
		}
		store := rendezvous.NewMemStore()
		initComms(t, 2, store, 30*time.Second)
		for r := range 2 {
			n, err := store.Add(context.Background(), "goccl/topo/ready/"+strconv.Itoa(r), 0)
			if err != nil || (n == 1) != set {
				t.Errorf("set %v: rank %d's ready counter %d, %v", set, r, n, err)
			}
		}
		es, _ := os.ReadDir(dir)
		if (len(es) == 1) != set {
			t.Errorf("set %v: files written: %v", set, es)
		}
	}
}

// TestTopoDumpFileNotBySplit: Split's communicators leave the parent's
// file alone.
func TestTopoDumpFileNotBySplit(t *testing.T) {
	p := filepath.Join(t.TempDir(), "topo.xml")
	t.Setenv("GOCCL_TOPO_DUMP_FILE", p)
	comms := initComms(t, 2, rendezvous.NewMemStore(), 30*time.Second)
	before, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(p)
	errs := make(chan error, 2)
	for r, c := range comms {
		go func() {
			nc, err := c.Split(context.Background(), r, 0) // two communicators of one rank each
			if nc != nil {
				nc.Close()
			}
			errs <- err
		}()
	}
	for range comms {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("a Split communicator wrote %s (stat: %v); the parent's was:\n%s", p, err, before)
	}
}
