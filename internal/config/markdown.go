package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

//go:generate go run ./gen ../../docs/environment.md

// Markdown renders docs/environment.md from the declarations: one table
// per group, in the order `goccl env` lists the variables, so the page
// cannot drift from the code (TestEnvironmentDoc checks it).
func Markdown() string {
	var b strings.Builder
	b.WriteString(`# Environment variables

<!-- Generated from internal/config by ` + "`go generate ./internal/config`" + `; do not edit. -->

Every ` + "`" + Prefix + "*`" + ` variable is declared once, in ` + "`internal/config`" + ` (name, kind,
default, doc line). ` + "`goccl env`" + ` lists them with the value that applies here and
its source (` + "`env`, `default`, `unset`" + `), marks a value Init would refuse as
` + "`INVALID`" + ` (exit status 1); ` + "`goccl doctor host`" + ` checks a job's environment
against the same list. A variable set to the empty string counts as unset.
Values: booleans ` + "`1/true/on/yes`" + ` and ` + "`0/false/off/no`" + `; sizes in bytes with
an optional K, M, G or T suffix (1024-based); durations as Go writes them
(` + "`90s`, `5m`" + `) or a number of seconds.

How launchers set the rank variables, the rendezvous store's forms and the
variables of other launchers goccl reads: [cli.md](cli.md#how-ranks-find-each-other).
`)
	for _, g := range []struct{ group, title string }{
		{"user", "Set by users"},
		{"launcher", "Set by launchers"},
		{"test", "Reserved for goccl's tests"},
	} {
		fmt.Fprintf(&b, "\n## %s\n\n| variable | values | default | meaning |\n|---|---|---|---|\n", g.title)
		for _, v := range all {
			if v.Group != g.group {
				continue
			}
			def := "–"
			if v.Default != "" {
				def = "`" + v.Default + "`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", v.Name, v.values(), def, mdCell(v.Doc))
		}
	}
	return b.String()
}

// values says what a variable accepts, for the table.
func (v *Var) values() string {
	switch v.Kind {
	case Enum:
		return "`" + strings.Join(v.Words, "`, `") + "`"
	case List:
		return "list of `" + strings.Join(v.Words, "`, `") + "`"
	case Int:
		if v.Max == math.MaxInt32 {
			return "integer ≥ " + strconv.FormatInt(v.Min, 10)
		}
		return fmt.Sprintf("integer %d…%d", v.Min, v.Max)
	}
	return v.Kind.String()
}

// mdCell escapes what would break a table cell or read as HTML.
func mdCell(s string) string {
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(s)
}
