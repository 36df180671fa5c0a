package topo

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/goccl/goccl/rendezvous"
)

// Job is the topology of a job: its hosts, each with the ranks that run
// there, and each rank's process.
type Job struct {
	// Hosts in the order of their lowest rank.
	Hosts []JobHost `json:"hosts"`
	// Ranks by rank.
	Ranks []Rank `json:"ranks"`
}

// JobHost is one host of a job.
type JobHost struct {
	Ranks []int `json:"ranks"`
	// Host is as its lowest rank detected it, without Process.
	Host *Host `json:"host"`
}

// Rank is one rank of a job.
type Rank struct {
	Rank int `json:"rank"`
	// Host indexes Job.Hosts; -1 when the rank published nothing.
	Host    int      `json:"host"`
	Process *Process `json:"process,omitempty"`
}

// NewJob groups the ranks' hosts (byRank[r] is rank r's; nil when unknown)
// by Host.ID.
func NewJob(byRank []*Host) *Job {
	j := &Job{Hosts: []JobHost{}, Ranks: make([]Rank, len(byRank))}
	index := map[string]int{}
	for r, h := range byRank {
		if h == nil {
			j.Ranks[r] = Rank{Rank: r, Host: -1}
			continue
		}
		i, ok := index[h.ID]
		if !ok {
			c := *h
			c.Process = nil
			i = len(j.Hosts)
			index[h.ID] = i
			j.Hosts = append(j.Hosts, JobHost{Host: &c})
		}
		j.Hosts[i].Ranks = append(j.Hosts[i].Ranks, r)
		j.Ranks[r] = Rank{Rank: r, Host: i, Process: h.Process}
	}
	return j
}

// Missing lists the ranks without a host.
func (j *Job) Missing() []int {
	var m []int
	for _, r := range j.Ranks {
		if r.Host < 0 {
			m = append(m, r.Rank)
		}
	}
	return m
}

// HostOf returns rank r's host, nil when unknown.
func (j *Job) HostOf(r int) *Host {
	if r < 0 || r >= len(j.Ranks) || j.Ranks[r].Host < 0 {
		return nil
	}
	return j.Hosts[j.Ranks[r].Host].Host
}

// The store keys: rank r's host as JSON, and a counter set to 1 once it is
// there (so that Collect can tell, without waiting, which ranks published).
func hostKey(r int) string  { return "goccl/topo/host/" + strconv.Itoa(r) }
func readyKey(r int) string { return "goccl/topo/ready/" + strconv.Itoa(r) }

// Publish puts rank's host (with its Process) in the store: one JSON value
// under goccl/topo/host/<rank>, then a counter at goccl/topo/ready/<rank>.
// Each communicator's store is its own, so the keys need no other name.
func Publish(ctx context.Context, store rendezvous.Store, rank int, h *Host) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if err := store.Set(ctx, hostKey(rank), b); err != nil {
		return fmt.Errorf("topo: publishing rank %d's host: %w", rank, err)
	}
	if _, err := store.Add(ctx, readyKey(rank), 1); err != nil {
		return fmt.Errorf("topo: publishing rank %d's host: %w", rank, err)
	}
	return nil
}

// Collect reads what ranks 0..size-1 have published without waiting for
// those that have not (they are left out of the job: Job.Missing). Call it
// once every rank that publishes has done so (after a barrier).
func Collect(ctx context.Context, store rendezvous.Store, size int) (*Job, error) {
	byRank := make([]*Host, size)
	for r := range byRank {
		n, err := store.Add(ctx, readyKey(r), 0)
		if err != nil {
			return nil, fmt.Errorf("topo: reading rank %d's host: %w", r, err)
		}
		if n == 0 {
			continue
		}
		if byRank[r], err = fetch(ctx, store, r); err != nil {
			return nil, err
		}
	}
	return NewJob(byRank), nil
}

// Gather publishes this rank's host, waits for every rank's (or ctx's end)
// and returns the job. Every rank of the job must call it.
func Gather(ctx context.Context, store rendezvous.Store, rank, size int, h *Host) (*Job, error) {
	if rank < 0 || rank >= size {
		return nil, fmt.Errorf("topo: rank %d outside [0, %d)", rank, size)
	}
	if err := Publish(ctx, store, rank, h); err != nil {
		return nil, err
	}
	byRank := make([]*Host, size)
	for r := range byRank {
		var err error
		if byRank[r], err = fetch(ctx, store, r); err != nil {
			return nil, err
		}
	}
	return NewJob(byRank), nil
}

// fetch reads rank r's host, waiting for it.
func fetch(ctx context.Context, store rendezvous.Store, r int) (*Host, error) {
	v, err := store.Get(ctx, hostKey(r))
	if err != nil {
		return nil, fmt.Errorf("topo: reading rank %d's host: %w", r, err)
	}
	h := new(Host)
	if err := json.Unmarshal(v, h); err != nil {
		return nil, fmt.Errorf("topo: rank %d published a bad host: %w", r, err)
	}
	return h, nil
}
