package doclinks

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

var (
	linkRE  = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	codeRE  = regexp.MustCompile("`[^`]*`")
	mdRefRE = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// docFiles lists the Markdown files the test checks, relative to root.
func docFiles(root string) ([]string, error) {
	files := []string{"README.md", "CONTRIBUTING.md", "CHANGELOG.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	for _, m := range more {
		rel, _ := filepath.Rel(root, m)
		files = append(files, rel)
	}
	return files, nil
}

// scan returns a file's heading anchors and its links (line, target),
// skipping fenced code blocks and code spans.
func scan(text string) (anchors map[string]bool, links []link) {
	anchors = map[string]bool{}
	seen := map[string]int{}
	fence := ""
	for i, line := range strings.Split(text, "\n") {
		t := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(t, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fence = t[:3]
			continue
		}
		if h, ok := heading(line); ok { // indented lines are never headings
			a := anchor(h)
			if n := seen[a]; n > 0 {
				anchors[fmt.Sprintf("%s-%d", a, n)] = true
			} else {
				anchors[a] = true
			}
			seen[a]++
		}
		for _, m := range linkRE.FindAllStringSubmatch(codeRE.ReplaceAllString(line, ""), -1) {
			links = append(links, link{i + 1, m[1]})
		}
	}
	return anchors, links
}

type link struct {
	line   int
	target string
}

// heading returns an ATX heading's text.
func heading(line string) (string, bool) {
	n := 0
	for n < len(line) && line[n] == '#' {
		n++
	}
	if n == 0 || n > 6 || n == len(line) || line[n] != ' ' {
		return "", false
	}
	return strings.TrimRight(strings.TrimSpace(line[n:]), "#"), true
}

// anchor is GitHub's anchor for a heading: its text without markup,
// lower-cased, letters, digits, '-' and '_' kept, spaces turned into '-',
// everything else dropped.
func anchor(h string) string {
	h = mdRefRE.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// check returns one message per broken link in the files under root.
func check(root string, files []string) ([]string, error) {
	anchors := map[string]map[string]bool{}
	links := map[string][]link{}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		anchors[f], links[f] = scan(string(b))
	}
	var bad []string
	for _, f := range files {
		for _, l := range links[f] {
			if msg := checkLink(root, f, l.target, anchors); msg != "" {
				bad = append(bad, fmt.Sprintf("%s:%d: %s: %s", f, l.line, l.target, msg))
			}
		}
	}
	return bad, nil
}

func checkLink(root, from, target string, anchors map[string]map[string]bool) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	path, frag, _ := strings.Cut(target, "#")
	file := from
	if path != "" {
		file = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(from), path)))
		if strings.HasPrefix(file, "../") {
			return "points outside the repository"
		}
		if _, err := os.Stat(filepath.Join(root, file)); err != nil {
			return "no such file"
		}
	}
	if frag == "" {
		return ""
	}
	a, ok := anchors[file]
	if !ok {
		if !strings.HasSuffix(file, ".md") {
			return "an anchor into a file that is not Markdown"
		}
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			return err.Error()
		}
		a, _ = scan(string(b))
		anchors[file] = a
	}
	if !a[frag] {
		return "no heading with anchor #" + frag
	}
	return ""
}

func TestLinks(t *testing.T) {
	root := "../.."
	files, err := docFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("only %d Markdown files found: %v", len(files), files)
	}
	bad, err := check(root, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Error(b)
	}
}

// TestCheckFindsBrokenLinks: the checker itself reports a missing file, a
// missing anchor in another file and in its own, and accepts good ones.
func TestCheckFindsBrokenLinks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/b.md", "# B page\n\n## Links over RoCE (`transport/roce`)\n\n## 4 × 2 at 1 Gbit/s\n\n## Same\n\n## Same\n")
	write("a.md", "# Top\n\n[ok](docs/b.md#links-over-roce-transportroce) [ok](docs/b.md#4--2-at-1-gbits)\n"+
		"[ok](docs/b.md#same-1) [ok](#top) [ok](docs) [web](https://example.com/x#y)\n"+
		"[gone](docs/c.md)\n[bad anchor](docs/b.md#nope)\n[bad self](#nope)\n"+
		"```\n[in code](nowhere.md)\n```\n`[span](nowhere.md)`\n")
	bad, err := check(dir, []string{"a.md", "docs/b.md"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"a.md:5: docs/c.md: no such file",
		"a.md:6: docs/b.md#nope: no heading with anchor #nope",
		"a.md:7: #nope: no heading with anchor #nope",
	}
	if strings.Join(bad, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(bad, "\n"), strings.Join(want, "\n"))
	}
}
