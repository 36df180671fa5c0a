package flightrec

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/goccl/goccl/doctor"
)

// WriteText prints the report: the dumps read, each rank's last
// collective, each process group's comparison, then the findings.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Flight-recorder dumps (%d):\n", len(r.Dumps))
	fmt.Fprintln(tw, "  rank\tformat\tversion\tlibrary\tentries\tfile")
	for _, d := range r.Dumps {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%d\t%s\n", d.Rank, d.Format, d.Version, or(d.Lib, "?"), len(d.Entries), d.Path)
	}
	if len(r.Last) > 0 {
		fmt.Fprintln(tw, "\nLast collective of each rank:")
		fmt.Fprintln(tw, "  rank\tgroup\tseq\top\tstate\terror")
		for _, l := range r.Last {
			fmt.Fprintf(tw, "  %d\t%s\t#%d\t%s\t%s\t%s\n", l.Rank, l.Group, l.Seq, l.Op, l.State, shorten(l.Error, 120))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, g := range r.Groups {
		fmt.Fprintf(w, "\nProcess group %s, ranks %s (dumped: %s): collectives #%d-#%d compared, %d matched",
			groupName(g.Name, g.Desc), ranksText(g.Ranks), ranksText(g.Dumped), g.FirstSeq, g.LastSeq, g.Matched)
		if m := g.Mismatch; m != nil {
			fmt.Fprintf(w, "; first mismatch #%d %s: %s, culprit rank(s) %s", m.Seq, m.Op, m.Kind, or(ranksText(m.Culprits), "none named"))
		}
		if h := g.Hang; h != nil {
			fmt.Fprintf(w, "; then waiting in #%d %s, which rank(s) %s never entered", h.Seq, h.Op, ranksText(h.Culprits))
		}
		fmt.Fprintln(w)
	}
	return doctor.WriteFindings(w, r.Findings)
}

func or(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

// shorten cuts s to n bytes with an ellipsis.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
