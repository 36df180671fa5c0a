// Package flightrec reads flight-recorder dumps, goccl's and PyTorch's,
// and finds the operation and the rank that a hang or a failure comes
// from (`goccl doctor flight-recorder DUMPS...`).
//
// A dump is one rank's record of its last operations in PyTorch's schema
// (torch/csrc/distributed/c10d/FlightRecorder.hpp): PyTorch writes it as a
// pickle by default or as JSON, goccl as JSON (GOCCL_FLIGHT_RECORDER_DUMP,
// (*goccl.Comm).DumpFlightRecorder). ReadPaths reads both, told apart by
// their first byte.
//
// Analyze matches the operations across ranks as PyTorch's fr_trace does:
// per process group, collectives by collective_seq_id, point-to-point
// operations by their pair of ranks and their order between them, and
// stops at the first collective that does not match, naming it and the
// culprit ranks in fr_trace's categories. Where fr_trace blames the rank
// compared with the first, Analyze blames the ranks that differ from the
// most ranks; where the ranks' later collectives line up one sequence
// number apart to the end of the dumps (some ranks issued one collective
// more, or skipped one: Mismatch.Shift), it blames the fewer side. Past
// the first mismatch it names, as fr_trace does, the first collective some
// ranks never entered (GroupResult.Hang): where the job then waits. The ring of each rank may have dropped old operations: the
// comparison starts at the first collective every rank still holds.
//
// Finding codes (severity):
//
//	fr-missing-rank       error  ranks entered a collective that a dumped rank never reached: the hang's culprit (fr_trace: "not all ranks joining collective")
//	fr-type-mismatch      error  ranks ran different collectives at one sequence number (COLLECTIVE_TYPE_MISMATCH)
//	fr-size-mismatch      error  ranks disagree on a collective's input or output sizes (SIZE_OR_SYNTAX_MISMATCH)
//	fr-dtype-mismatch     error  ranks disagree on a collective's element type (COLLECTIVE_DTYPE_MISMATCH)
//	fr-state-mismatch     warn   some ranks completed a collective that others had not (COLLECTIVE_STATE_MISMATCH)
//	fr-not-completed      error  every rank entered a collective and agrees on it, none completed it
//	fr-p2p-unmatched      error  a send or recv not completed whose peer never posted the matching recv or send
//	fr-p2p-size-mismatch  error  a send and its recv disagree on the size
//	fr-no-dump            warn   a member of a process group left no dump: it is compared nowhere
//	fr-version-mismatch   warn   the dumps are of different schema versions
//	fr-all-matched        info   every collective held by every rank matches and completed
package flightrec

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/goccl/goccl/doctor"
)

// Report is what Analyze found.
type Report struct {
	Dumps    []*Dump          `json:"dumps"`
	Groups   []GroupResult    `json:"groups"`
	Last     []RankLast       `json:"last"`
	Findings []doctor.Finding `json:"findings"`
}

// GroupResult is the comparison of one process group's collectives.
type GroupResult struct {
	Name     string    `json:"name"`
	Desc     string    `json:"desc"`
	Ranks    []int     `json:"ranks"`
	Dumped   []int     `json:"dumped"`
	FirstSeq int64     `json:"first_seq"` // the collectives compared: FirstSeq to LastSeq
	LastSeq  int64     `json:"last_seq"`
	Matched  int       `json:"matched"` // compared collectives that match and completed everywhere
	Mismatch *Mismatch `json:"mismatch,omitempty"`
	// Hang is the first collective after Mismatch that some dumped ranks
	// never entered: where the job then waits (fr_trace, which goes on
	// past a mismatch, reports it as "not all ranks joining").
	Hang *Mismatch `json:"hang,omitempty"`
}

// Mismatch is the first collective of a group that does not match.
type Mismatch struct {
	Seq      int64  `json:"collective_seq_id"`
	Op       string `json:"op"`
	Kind     string `json:"kind"` // fr_trace's category: MISSING_RANKS, COLLECTIVE_TYPE_MISMATCH, ...
	Culprits []int  `json:"culprits"`
	Detail   string `json:"detail"`
	// Shift is set when the ranks' later collectives line up one sequence
	// number apart: Culprits issued one collective more, or skipped one.
	Shift bool `json:"shift,omitempty"`
}

// RankLast is a rank's last collective in a group, and its error if goccl
// recorded one.
type RankLast struct {
	Rank  int    `json:"rank"`
	Group string `json:"group"`
	Seq   int64  `json:"collective_seq_id"`
	Op    string `json:"op"`
	State string `json:"state"`
	Error string `json:"error,omitempty"`
}

// Analyze compares the dumps' operations across ranks (see the package doc).
func Analyze(dumps []*Dump) *Report {
	rep := &Report{Dumps: dumps, Groups: []GroupResult{}, Last: []RankLast{}, Findings: []doctor.Finding{}}
	versions := map[string][]int{}
	for _, d := range dumps {
		versions[d.Version] = append(versions[d.Version], d.Rank)
	}
	if len(versions) > 1 {
		rep.Findings = append(rep.Findings, doctor.Finding{Severity: doctor.SevWarn, Code: "fr-version-mismatch",
			Message: fmt.Sprintf("the dumps are of different flight-recorder versions: %s", describeVersions(versions)),
			Fix:     "Take every rank's dump from the same build of the job; fields may differ between versions."})
	}
	for _, g := range groups(dumps) {
		res, fs := analyzeGroup(g, dumps)
		rep.Groups = append(rep.Groups, res)
		rep.Findings = append(rep.Findings, fs...)
		rep.Last = append(rep.Last, lastOps(g.Name, dumps)...)
		rep.Findings = append(rep.Findings, analyzeP2P(g, dumps)...)
	}
	if !doctor.HasErrors(rep.Findings) {
		for _, g := range rep.Groups {
			if g.Mismatch == nil && g.Matched > 0 {
				rep.Findings = append(rep.Findings, doctor.Finding{Severity: doctor.SevInfo, Code: "fr-all-matched",
					Message: fmt.Sprintf("process group %s: collectives #%d-#%d (%d) match on ranks %s and completed", groupName(g.Name, g.Desc), g.FirstSeq, g.LastSeq, g.Matched, ranksText(g.Dumped))})
			}
		}
	}
	doctor.SortFindings(rep.Findings)
	return rep
}

func describeVersions(v map[string][]int) string {
	var parts []string
	for ver, ranks := range v {
		parts = append(parts, fmt.Sprintf("%s (ranks %s)", ver, ranksText(ranks)))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// groups are the process groups the dumps describe, by name; the ranks of
// a group that pg_config does not describe are those that dumped it.
func groups(dumps []*Dump) []Group {
	byName := map[string]Group{}
	for _, d := range dumps {
		for name, g := range d.Groups {
			if _, ok := byName[name]; !ok {
				byName[name] = g
			}
		}
		for i := range d.Entries {
			name := d.Entries[i].pg()
			if g, ok := byName[name]; !ok {
				byName[name] = Group{Name: name, Desc: descOf(&d.Entries[i]), Ranks: []int{d.Rank}}
			} else if !slices.Contains(g.Ranks, d.Rank) && d.Groups[name].Name == "" {
				g.Ranks = append(g.Ranks, d.Rank)
				byName[name] = g
			}
		}
	}
	out := make([]Group, 0, len(byName))
	for _, g := range byName {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func descOf(e *Entry) string {
	if len(e.ProcessGroup) > 1 {
		return e.ProcessGroup[1]
	}
	return ""
}

// groupName is "0 (default_pg)".
func groupName(name, desc string) string {
	if desc == "" || desc == "undefined" {
		return name
	}
	return name + " (" + desc + ")"
}

// collectives are one rank's collectives of group name by sequence number
// (the first entry of a coalesced sequence number that is not the
// "coalesced" marker).
func collectives(d *Dump, name string) map[int64]*Entry {
	m := map[int64]*Entry{}
	for i := range d.Entries {
		e := &d.Entries[i]
		if e.pg() != name || e.IsP2P || e.op() == "coalesced" {
			continue
		}
		if _, ok := m[e.CollectiveSeqID]; !ok {
			m[e.CollectiveSeqID] = e
		}
	}
	return m
}

// lastOps are each rank's last collective in group name.
func lastOps(name string, dumps []*Dump) []RankLast {
	var out []RankLast
	for _, d := range dumps {
		var last *Entry
		for i := range d.Entries {
			e := &d.Entries[i]
			if e.pg() == name && !e.IsP2P && e.State != "scheduled" && (last == nil || e.CollectiveSeqID >= last.CollectiveSeqID) {
				last = e
			}
		}
		if last != nil {
			out = append(out, RankLast{Rank: d.Rank, Group: name, Seq: last.CollectiveSeqID, Op: last.op(), State: last.State, Error: last.Error})
		}
	}
	return out
}

// ranksText is "0,2,5".
func ranksText(ranks []int) string {
	s := make([]string, len(ranks))
	for i, r := range ranks {
		s[i] = fmt.Sprint(r)
	}
	return strings.Join(s, ",")
}
