package doctor

import "strings"

// Folder folds repeated findings, so that a report on a long input stays
// short: findings of the same severity and code whose messages differ only
// in their numbers (a table's ordinal and line, a bandwidth) are reported
// once, as the first of them with Count, FirstLine and LastLine set. Its
// memory is bounded whatever the number of findings added: past
// foldMaxShapes distinct messages, findings fold by severity and code
// alone. The zero value is ready to use.
type Folder struct {
	index map[string]int // key -> position in fs
	fs    []Finding
}

// foldMaxShapes is how many distinct (severity, code, message shape) keys
// a Folder keeps before it folds by severity and code alone.
const foldMaxShapes = 1024

// Add adds f, seen at input line line (0 when it has none).
func (fo *Folder) Add(f Finding, line int) {
	if fo.index == nil {
		fo.index = map[string]int{}
	}
	coarse := string(f.Severity) + "\x00" + f.Code
	key := coarse + "\x00" + messageShape(f.Message)
	i, ok := fo.index[key]
	if !ok && len(fo.index) >= foldMaxShapes {
		key = coarse
		i, ok = fo.index[key]
	}
	if !ok {
		fo.index[key] = len(fo.fs)
		f.Count, f.FirstLine, f.LastLine = 1, line, line
		fo.fs = append(fo.fs, f)
		return
	}
	g := &fo.fs[i]
	g.Count++
	if line > 0 && (g.FirstLine == 0 || line < g.FirstLine) {
		g.FirstLine = line
	}
	g.LastLine = max(g.LastLine, line)
}

// Findings returns the folded findings in the order their first one was
// added; one added once is returned as it was given (Count 0).
func (fo *Folder) Findings() []Finding {
	out := make([]Finding, len(fo.fs))
	copy(out, fo.fs)
	for i := range out {
		if out[i].Count == 1 {
			out[i].Count, out[i].FirstLine, out[i].LastLine = 0, 0, 0
		}
	}
	return out
}

// messageShape is msg with every number (a run of digits, with the dots
// between digits) replaced by "#".
func messageShape(msg string) string {
	var b strings.Builder
	b.Grow(len(msg))
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c < '0' || c > '9' {
			b.WriteByte(c)
			continue
		}
		for i+1 < len(msg) && (isDigit(msg[i+1]) || msg[i+1] == '.' && i+2 < len(msg) && isDigit(msg[i+2])) {
			i++
		}
		b.WriteByte('#')
	}
	return b.String()
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
