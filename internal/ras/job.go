package ras

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Job is the outcome of one status query: every rank of the job's
// communicator (JobID) probed.
type Job struct {
	Version string // "goccl v1.2.3"
	JobID   string // the communicator whose ranks are Peers (the server's)
	Time    time.Time
	Elapsed time.Duration // probing time
	Peers   []PeerResult  // by rank of JobID
	Verbose bool          // VERBOSE STATUS: every rank's details, not only outliers'
}

// The status bits of a communicator (NCCL's RAS_ACS_*: the highest set
// bit names it) and its error bits (RAS_ACE_*).
const (
	stNoComm = 1 << iota
	stInit
	stRunning
	stFinalize
	stAbort
)

const (
	errMismatch = 1 << iota
	errError
	errIncomplete
)

var statusWords = []string{"NOCOMM", "INIT", "RUNNING", "FINALIZE", "ABORT"}

var errorWords = []string{"OK", "MISMATCH", "ERROR", "ERROR,MISMATCH", "INCOMPLETE",
	"INCOMPLETE,MISMATCH", "INCOMPLETE,ERROR", "INCOMPLETE,ERROR,MISMATCH"}

// commView is one communicator gathered from the ranks that answered.
type commView struct {
	id      string
	size    int
	ranks   []rankView // reported, by rank
	missing []int      // ranks of [0, size) with no report
	status  int        // st* bits of the ranks that reported
	errors  int        // err* bits
	nodes   int
	perNode [2]int // fewest and most ranks on one node
}

// rankView is one rank's report of a communicator and its process.
type rankView struct {
	rep  *CommReport
	proc *PeerResult
}

// statusWord is the communicator's status as RAS prints it.
func (v *commView) statusWord() string {
	w := "NOCOMM"
	for i := range statusWords {
		if v.status&(1<<i) != 0 {
			w = statusWords[i]
		}
	}
	return w
}

func statusBit(s string) int {
	for i, w := range statusWords {
		if w == s {
			return 1 << i
		}
	}
	return stRunning
}

// hash is a communicator id as RAS's 64-bit hex comm hash.
func hash(id string) string {
	h := fnv.New64a()
	h.Write([]byte(id))
	return fmt.Sprintf("%016x", h.Sum64())
}

// processes returns the job's processes: each distinct (host, pid) among
// the peers, with the ranks it holds, in order of its first rank.
func (j *Job) processes() [][]int {
	idx := map[string]int{}
	var procs [][]int
	for _, p := range j.Peers {
		k := p.HostID + "/" + strconv.Itoa(p.Pid)
		if p.Pid == 0 {
			k = "rank/" + strconv.Itoa(p.Rank) // unknown process: its own
		}
		i, ok := idx[k]
		if !ok {
			i = len(procs)
			idx[k] = i
			procs = append(procs, nil)
		}
		procs[i] = append(procs[i], p.Rank)
	}
	return procs
}

// comms gathers the communicators the answering processes reported,
// largest first.
func (j *Job) comms() []*commView {
	byID := map[string]*commView{}
	seen := map[string]bool{}
	var views []*commView
	for i := range j.Peers {
		p := &j.Peers[i]
		if p.Report == nil {
			continue
		}
		for k := range p.Report.Comms {
			cr := &p.Report.Comms[k]
			if key := cr.ID + "/" + strconv.Itoa(cr.Rank); seen[key] {
				continue // several ranks of one process answer with the same report
			} else {
				seen[key] = true
			}
			v := byID[cr.ID]
			if v == nil {
				v = &commView{id: cr.ID, size: cr.Size}
				byID[cr.ID] = v
				views = append(views, v)
			}
			v.ranks = append(v.ranks, rankView{rep: cr, proc: p})
			if cr.ID == j.JobID && cr.Rank < len(j.Peers) && j.Peers[cr.Rank].Report != nil {
				v.ranks[len(v.ranks)-1].proc = &j.Peers[cr.Rank] // one process may hold several ranks
			}
		}
	}
	for _, v := range views {
		j.analyze(v)
	}
	slices.SortStableFunc(views, func(a, b *commView) int {
		return cmp.Or(b.size-a.size, b.nodes-a.nodes, cmp.Compare(a.id, b.id))
	})
	return views
}

// analyze fills v's missing ranks, status, errors and node counts.
func (j *Job) analyze(v *commView) {
	slices.SortFunc(v.ranks, func(a, b rankView) int { return a.rep.Rank - b.rep.Rank })
	have := make(map[int]bool, len(v.ranks))
	perHost := map[string]int{}
	first := v.ranks[0].rep
	for _, r := range v.ranks {
		have[r.rep.Rank] = true
		perHost[r.proc.Report.HostID]++
		v.status |= statusBit(r.rep.Status)
		if r.rep.Error != "" {
			v.errors |= errError
		}
		if !sameCounts(r.rep.Counts, first.Counts) {
			v.errors |= errMismatch
		}
	}
	for r := 0; r < v.size; r++ {
		if !have[r] {
			v.missing = append(v.missing, r)
		}
	}
	if len(v.missing) > 0 {
		v.errors |= errIncomplete
	}
	if v.status&(v.status-1) != 0 {
		v.errors |= errMismatch // ranks in different states
	}
	v.nodes = len(perHost)
	v.perNode = [2]int{v.size, 0}
	for _, n := range perHost {
		v.perNode[0], v.perNode[1] = min(v.perNode[0], n), max(v.perNode[1], n)
	}
}

func sameCounts(a, b map[string]uint64) bool {
	for k, n := range a {
		if b[k] != n {
			return false
		}
	}
	for k, n := range b {
		if a[k] != n {
			return false
		}
	}
	return true
}

// peerOf is the process that holds rank r of communicator v, when known:
// for the job's communicator, the probed peer of that rank.
func (j *Job) peerOf(v *commView, r int) *PeerResult {
	if v.id == j.JobID && r >= 0 && r < len(j.Peers) && j.Peers[r].Rank == r {
		return &j.Peers[r]
	}
	return nil
}

// silent lists the peers that did not answer, by state.
func (j *Job) silent(s State) []*PeerResult {
	var out []*PeerResult
	for i := range j.Peers {
		if j.Peers[i].State == s {
			out = append(out, &j.Peers[i])
		}
	}
	return out
}

// timeouts is how many probes ended without an answer in time.
func (j *Job) timeouts() int { return len(j.silent(Unresponsive)) }

// versionLine is the first line of a text reply.
func versionLine(version string) string {
	return fmt.Sprintf("%s (NCCL RAS client protocol %d)\n\n", cmp.Or(version, "goccl"), ProtocolVersion)
}

// procText describes a rank's process as RAS does ("Process 4242 on node
// host managing rank 2").
func procText(p *PeerResult) string { return rankProcText(p, p.Rank) }

// rankProcText describes the process p that holds rank.
func rankProcText(p *PeerResult, rank int) string {
	host, pid := cmp.Or(p.Host, "?"), p.Pid
	if p.Report != nil {
		host, pid = cmp.Or(p.Report.Host, host), p.Report.Pid
	}
	return fmt.Sprintf("Process %d on node %s managing rank %d", pid, host, rank)
}

// bytesText prints n bytes for people (1.5 GiB).
func bytesText(n uint64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return strconv.FormatUint(n, 10) + " B"
	}
	f, i := float64(n)/1024, 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + " " + units[i:i+1] + "iB"
}

// joinRanks is "0, 1, 3".
func joinRanks(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.Itoa(r)
	}
	return strings.Join(s, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
