package flightrec

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/goccl/goccl/doctor"
)

// p2pKey names one message: its sender, its receiver (global ranks) and
// its number between them (from 1).
type p2pKey struct {
	src, dst int
	n        int64
}

// p2pOps are the sends and the receives of group g in the dumps, by
// message. goccl numbers a pair's messages itself (p2p_seq_id); PyTorch
// numbers a rank's point-to-point operations, so for its dumps the number
// is the operation's place among the rank's sends to (receives from) that
// peer in the dump.
func p2pOps(g Group, dumps []*Dump) (sends, recvs map[p2pKey]*Entry, dumped map[int]bool) {
	sends, recvs, dumped = map[p2pKey]*Entry{}, map[p2pKey]*Entry{}, map[int]bool{}
	for _, d := range dumps {
		if !hasGroup(d, g.Name) {
			continue
		}
		dumped[d.Rank] = true
		goccl := strings.HasPrefix(d.Lib, "goccl")
		count := map[[2]int]int64{}
		for i := range d.Entries {
			e := &d.Entries[i]
			if e.pg() != g.Name || !e.IsP2P {
				continue
			}
			src, dst, ok := peers(e, g)
			if !ok {
				continue
			}
			k := p2pKey{src: src, dst: dst}
			count[[2]int{src, dst}]++
			k.n = count[[2]int{src, dst}]
			if goccl {
				k.n = e.P2PSeqID
			}
			if e.op() == "send" && src == d.Rank {
				sends[k] = e
			} else if e.op() == "recv" && dst == d.Rank {
				recvs[k] = e
			}
		}
	}
	return sends, recvs, dumped
}

// peers reads "nccl:send 0->1" and "nccl:recv 1<-0" (ranks in the group)
// as global ranks.
func peers(e *Entry, g Group) (src, dst int, ok bool) {
	_, meta, found := strings.Cut(strings.TrimPrefix(e.ProfilingName[strings.Index(e.ProfilingName, ":")+1:], " "), " ")
	if !found {
		return 0, 0, false
	}
	var a, b string
	switch e.op() {
	case "send":
		a, b, found = strings.Cut(meta, "->")
	case "recv":
		b, a, found = strings.Cut(meta, "<-")
	default:
		return 0, 0, false
	}
	s, err1 := strconv.Atoi(strings.TrimSpace(a))
	t, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !found || err1 != nil || err2 != nil || s < 0 || t < 0 {
		return 0, 0, false
	}
	if len(g.Ranks) > 0 {
		if s >= len(g.Ranks) || t >= len(g.Ranks) {
			return 0, 0, false
		}
		sorted := append([]int(nil), g.Ranks...)
		sort.Ints(sorted)
		s, t = sorted[s], sorted[t]
	}
	return s, t, true
}

// analyzeP2P matches group g's sends with their receives: a send or a
// receive that did not complete and whose peer (dumped) has no matching
// receive or send names the peer; a matched pair that disagrees on the
// size names both. One finding per pair of ranks, the first by number.
func analyzeP2P(g Group, dumps []*Dump) []doctor.Finding {
	sends, recvs, dumped := p2pOps(g, dumps)
	var fs []doctor.Finding
	seen := map[[2]int]bool{}
	add := func(pair [2]int, f doctor.Finding) {
		if !seen[pair] {
			seen[pair] = true
			fs = append(fs, f)
		}
	}
	for _, k := range sortedP2P(sends, recvs) {
		s, r := sends[k], recvs[k]
		pair := [2]int{k.src, k.dst}
		where := fmt.Sprintf("process group %s, message #%d from rank %d to rank %d", groupName(g.Name, g.Desc), k.n, k.src, k.dst)
		switch {
		case s != nil && r != nil && fmt.Sprint(s.InputSizes) != fmt.Sprint(r.OutputSizes):
			add(pair, doctor.Finding{Severity: doctor.SevError, Code: "fr-p2p-size-mismatch",
				Message: fmt.Sprintf("%s: culprit rank(s) %d,%d: the send has sizes %v, the recv %v [SIZE_OR_SYNTAX_MISMATCH]", where, k.src, k.dst, s.InputSizes, r.OutputSizes),
				Fix:     "Make the receiver post a recv of the count the sender sends (messages between two ranks match in order)."})
		case s != nil && r == nil && s.State != "completed" && dumped[k.dst]:
			add(pair, unmatched(where, k.dst, "recv", s))
		case r != nil && s == nil && r.State != "completed" && dumped[k.src]:
			add(pair, unmatched(where, k.src, "send", r))
		}
	}
	return fs
}

func unmatched(where string, culprit int, missing string, e *Entry) doctor.Finding {
	return doctor.Finding{Severity: doctor.SevError, Code: "fr-p2p-unmatched",
		Message: fmt.Sprintf("%s: culprit rank %d: it never posted the %s that matches this %s (%s) [MISSING_RANKS]", where, culprit, missing, e.op(), e.State),
		Fix:     fmt.Sprintf("Find why rank %d did not post the %s: every send needs its recv on the peer, in the same order between the two ranks.", culprit, missing)}
}

// sortedP2P is every message key of sends and recvs, ordered.
func sortedP2P(sends, recvs map[p2pKey]*Entry) []p2pKey {
	set := map[p2pKey]bool{}
	for k := range sends {
		set[k] = true
	}
	for k := range recvs {
		set[k] = true
	}
	out := make([]p2pKey, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.src != b.src {
			return a.src < b.src
		}
		if a.dst != b.dst {
			return a.dst < b.dst
		}
		return a.n < b.n
	})
	return out
}
