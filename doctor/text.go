package doctor

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Text helpers every reader shares.

// ReadLines calls fn with each line of r (1-based number, without its "\n"
// or "\r\n"), keeping at most maxLine bytes of a line (the rest up to the
// newline is dropped, so memory stays bounded whatever the input). It stops
// after maxLines lines (0: no limit) and then reports truncated. The error
// is r's, never io.EOF.
func ReadLines(r io.Reader, maxLine, maxLines int, fn func(n int, line string)) (truncated bool, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	n := 0
	var buf []byte
	for {
		buf = buf[:0]
		long, any := false, false
		for {
			chunk, isPrefix, rerr := br.ReadLine()
			if rerr != nil {
				if !errors.Is(rerr, io.EOF) {
					return false, rerr
				}
				if any {
					n++
					fn(n, string(buf))
				}
				return false, nil
			}
			any = true
			if !long {
				if room := maxLine - len(buf); len(chunk) > room {
					chunk, long = chunk[:room], true
				}
				buf = append(buf, chunk...)
			}
			if !isPrefix {
				break
			}
		}
		n++
		if maxLines > 0 && n > maxLines {
			return true, nil
		}
		fn(n, string(buf))
	}
}

// SortFindings orders findings errors first, then warnings, then notes,
// keeping input order within a severity.
func SortFindings(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool {
		return fs[i].Severity.Rank() < fs[j].Severity.Rank()
	})
}

// WriteFindings prints findings as every text report ends: a count, then
// one per line (severity, code, message) with the fix indented below. A
// folded finding ends with how many it stands for and their first and last
// lines: "... (×12, lines 10–950)".
func WriteFindings(w io.Writer, fs []Finding) error {
	if len(fs) == 0 {
		_, err := fmt.Fprintln(w, "\nNo findings.")
		return err
	}
	if _, err := fmt.Fprintf(w, "\nFindings (%d):\n", len(fs)); err != nil {
		return err
	}
	for _, f := range fs {
		if _, err := fmt.Fprintf(w, "  %-5s %s: %s%s\n", strings.ToUpper(string(f.Severity)), f.Code, f.Message, folded(f)); err != nil {
			return err
		}
		if f.Fix != "" {
			if _, err := fmt.Fprintf(w, "        fix: %s\n", f.Fix); err != nil {
				return err
			}
		}
	}
	return nil
}

// folded is the suffix of a folded finding's line, "" for one seen once.
func folded(f Finding) string {
	switch {
	case f.Count < 2:
		return ""
	case f.FirstLine > 0:
		return fmt.Sprintf(" (×%d, lines %d–%d)", f.Count, f.FirstLine, f.LastLine)
	}
	return fmt.Sprintf(" (×%d)", f.Count)
}

// ParseNCCLInt reads an integer NCCL parameter the way NCCL does, as C's
// strtoll(s, &end, 0) parses the leading integer of s (white space, sign,
// 0x hex, 0 octal, decimal; trailing text, such as the "." NCCL's log puts
// after a value, ignored), and reports whether there was one. A value out
// of range saturates far from 0: callers only tell zero from non-zero.
func ParseNCCLInt(s string) (int64, bool) {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg, s = s[0] == '-', s[1:]
	}
	base, digits := 10, s
	switch {
	case len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && strings.ContainsRune("0123456789abcdefABCDEF", rune(s[2])):
		base, digits = 16, s[2:]
	case len(s) > 0 && s[0] == '0':
		base = 8
	}
	end := 0
	for end < len(digits) {
		c := digits[end]
		var d int
		switch {
		case c >= '0' && c <= '9':
			d = int(c - '0')
		case c >= 'a' && c <= 'f':
			d = int(c-'a') + 10
		case c >= 'A' && c <= 'F':
			d = int(c-'A') + 10
		default:
			d = 99
		}
		if d >= base {
			break
		}
		end++
	}
	if end == 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(digits[:end], base, 64)
	if err != nil {
		n = 1 << 62 // out of range: strtoll saturates; only "non-zero" matters here
	}
	if neg {
		n = -n
	}
	return n, true
}

// OrDefault is s, or def when s is empty.
func OrDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// ExpandPaths lists the files the paths name: a file as given, a folder as
// its regular files that keep accepts, in name order (the readers that
// take every rank's file, as PyTorch's fr_trace and HTA read a folder). A
// folder with none is an error naming it.
func ExpandPaths(paths []string, keep func(name string) bool) ([]string, error) {
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			return nil, err
		}
		n := len(files)
		for _, e := range ents {
			if e.Type().IsRegular() && keep(e.Name()) {
				files = append(files, filepath.Join(p, e.Name()))
			}
		}
		if len(files) == n {
			return nil, fmt.Errorf("%s: no files to read in the folder", p)
		}
	}
	return files, nil
}
