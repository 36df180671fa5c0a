package doctor

import (
	"regexp"
	"strings"
)

// Helpers shared by the table readers (nccltests, topo, ibv).

// TableMaxLine caps the length of one input line; longer lines are cut
// there (the rest up to the newline is dropped). No table these readers
// understand has lines anywhere near this long.
const TableMaxLine = 4096

// TableMaxLines caps how many lines the topo and ibv readers look at, so
// that a multi-gigabyte file cannot make their reports grow without bound
// (nccltests reads any length in bounded memory).
const TableMaxLines = 1 << 20

// ansiRe matches ANSI escape sequences (colour, bold, underline) and the
// remnants they leave when the ESC byte was lost in a paste ("[1m", "[0m").
var ansiRe = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]|\[[0-9;]*m`)

// launcherPrefixRe matches the prefixes launchers put before each line of output:
// Open MPI --tag-output "[1,0]<stdout>:", Intel MPI / MPICH "[0] ", and
// Slurm srun -l "0: ".
var launcherPrefixRe = regexp.MustCompile(`^\s*(?:\[\d+(?:,\d+)*\](?:<std(?:out|err)>)?:?|\d+: )\s?`)

// CleanLine strips ANSI sequences, a launcher prefix, a trailing CR and
// control characters other than TAB.
func CleanLine(line string) string {
	if strings.ContainsAny(line, "\x1b[") {
		line = ansiRe.ReplaceAllString(line, "")
	}
	line = launcherPrefixRe.ReplaceAllString(line, "")
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

// OneLine makes a value safe for one line of text output.
func OneLine(s string, max int) string {
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
