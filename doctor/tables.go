package doctor

import (
	"regexp"
	"strings"
)

// Helpers shared by the table readers (nccl-tests, topo, ibv). Names carry
// the "tables" prefix so that they cannot clash with the other readers.

// tablesMaxLine caps the length of one input line; longer lines are cut
// there (the rest up to the newline is dropped). No table these readers
// understand has lines anywhere near this long.
const tablesMaxLine = 4096

// tablesMaxLines caps how many lines one reader looks at, so that a
// multi-gigabyte file cannot make a report grow without bound.
const tablesMaxLines = 1 << 20

// tablesANSI matches ANSI escape sequences (colour, bold, underline) and the
// remnants they leave when the ESC byte was lost in a paste ("[1m", "[0m").
var tablesANSI = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]|\[[0-9;]*m`)

// tablesPrefix matches the prefixes launchers put before each line of output:
// Open MPI --tag-output "[1,0]<stdout>:", Intel MPI / MPICH "[0] ", and
// Slurm srun -l "0: ".
var tablesPrefix = regexp.MustCompile(`^\s*(?:\[\d+(?:,\d+)*\](?:<std(?:out|err)>)?:?|\d+: )\s?`)

// tablesClean strips ANSI sequences, a launcher prefix, a trailing CR and
// control characters other than TAB.
func tablesClean(line string) string {
	if strings.ContainsAny(line, "\x1b[") {
		line = tablesANSI.ReplaceAllString(line, "")
	}
	line = tablesPrefix.ReplaceAllString(line, "")
	if strings.IndexFunc(line, func(r rune) bool { return (r < 0x20 && r != '\t') || r == 0x7f }) >= 0 {
		line = strings.Map(func(r rune) rune {
			if (r < 0x20 && r != '\t') || r == 0x7f {
				return -1
			}
			return r
		}, line)
	}
	return line
}

// tablesOneLine makes a value safe for one line of text output.
func tablesOneLine(s string, max int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > max {
		s = s[:max] + "..."
	}
	return s
}
