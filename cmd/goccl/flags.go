package main

// The subcommands' flags: github.com/spf13/pflag (GNU style) with goccl's
// conventions, set up in one place by newFlags.
//
// GNU style: --name=value, --name value, a shorthand letter with its value
// attached or apart (-n4, -n 4, -n=4), boolean shorthands grouped (-ab).
//
// OpenMPI/Go-style compatibility: Go's flag package, mpirun and nccl-tests'
// long options as people type them take one dash (-np 4, -metrics-addr
// :9400, -minbytes=8), which pflag would read as shorthands (-np as -n p).
// Before pflag parses, an argument with one dash whose name, up to any '=',
// has more than one letter and is a long flag name of the command (or
// "help") gets a second dash: -np 4 is --np 4. Any other single-dash
// argument is a shorthand group, as GNU getopt reads it (-b8 is -b 8).

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"

	"github.com/spf13/pflag"
)

// cliFlags is a subcommand's flag set.
type cliFlags struct {
	*pflag.FlagSet
	cmd          string // "goccl run": names the command in messages
	interspersed bool   // flags after positional arguments (pflag's default)
}

// newFlags returns the flag set of the command cmd ("goccl run"): errors
// are returned, not printed (parseOrExit prints them), and -h or --help
// calls usage, which writes the help to fs.Output(), output.
func newFlags(cmd string, output io.Writer, usage func(fs *cliFlags)) *cliFlags {
	fs := &cliFlags{FlagSet: pflag.NewFlagSet(cmd, pflag.ContinueOnError), cmd: cmd, interspersed: true}
	fs.SetOutput(output)
	fs.SortFlags = false // the order they are defined in
	fs.Usage = func() {
		if usage != nil {
			usage(fs)
			return
		}
		fmt.Fprintf(fs.Output(), "usage: %s [flags]\n\nFlags:\n", cmd)
		fs.PrintDefaults()
	}
	return fs
}

// SetInterspersed(false) ends the flags at the first positional argument
// (goccl run PROG ARGS...: nothing after PROG is the launcher's).
func (fs *cliFlags) SetInterspersed(interspersed bool) {
	fs.interspersed = interspersed
	fs.FlagSet.SetInterspersed(interspersed)
}

// parse parses args (the single-dash rewrite, then pflag). For -h or
// --help it prints the usage and returns pflag.ErrHelp; other errors name
// the flag as typed: an unknown one as `unknown flag "--minbyte"; did you
// mean "--minbytes"?`.
func (fs *cliFlags) parse(args []string) error {
	rewritten, err := fs.rewrite(args)
	if err != nil {
		return err
	}
	err = fs.Parse(rewritten)
	if err == nil || errors.Is(err, pflag.ErrHelp) {
		return err
	}
	return fs.explain(args, err)
}

// parseOrExit parses args. When the command must end there it returns its
// exit status and true: 0 after the help, 2 after printing the error and
// where to find the usage.
func (fs *cliFlags) parseOrExit(args []string) (status int, exit bool) {
	err := fs.parse(args)
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, pflag.ErrHelp):
		return 0, true
	}
	fmt.Fprintf(fs.Output(), "%s: %v\nRun '%s -h' for usage.\n", fs.cmd, err, fs.cmd)
	return 2, true
}

// rewrite gives a second dash to the single-dash long flags of args (see
// the file comment). It walks args as pflag will, so a flag's value
// (--title -np), everything after "--", and everything from the first
// positional argument on when flags are not interspersed stay as they are.
//
// It also refuses a long word that pflag would read as a shorthand with
// its value attached although it is a typo of a long flag (-dev-prt as -d
// ev-prt): see misread.
func (fs *cliFlags) rewrite(args []string) ([]string, error) {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			if a == "--" || !fs.interspersed {
				return append(out, args[i:]...), nil
			}
			out = append(out, a)
			continue
		}
		if a[1] != '-' {
			word, _, _ := strings.Cut(a[1:], "=")
			switch {
			case len(word) > 1 && (fs.Lookup(word) != nil || word == "help"):
				a = "-" + a
			case fs.misread(a):
				err := fs.unknown("-" + word)
				if f := fs.ShorthandLookup(a[1:2]); f.Value.Type() == "string" {
					err = fmt.Errorf("%w (-%s with the value %q is -%s %s)", err, f.Shorthand, a[2:], f.Shorthand, a[2:])
				}
				return nil, err
			}
		}
		out = append(out, a)
		if fs.valueNext(a) && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out, nil
}

// misread reports whether pflag would read the single-dash argument a as
// a shorthand with its value attached (-dfloat as -d float) when a looks
// like a mistyped long flag: its word, up to any '=', has five letters or
// more and is within closest's distance of a long flag name. Shorter words
// (-n16, -dlo) are taken as shorthands; a typo among them that the
// shorthand cannot take as a value (-npp for -np) is named by explain.
func (fs *cliFlags) misread(a string) bool {
	word, _, _ := strings.Cut(a[1:], "=")
	f := fs.ShorthandLookup(a[1:2])
	if len(word) < 5 || f == nil || f.NoOptDefVal != "" {
		return false
	}
	var long []string
	fs.VisitAll(func(f *pflag.Flag) {
		if len(f.Name) > 1 {
			long = append(long, f.Name)
		}
	})
	return closest(word, long) != ""
}

// valueNext reports whether pflag takes the value of the flag argument a
// (after rewrite) from the next argument: --name without "=" of a flag
// that needs a value, or a shorthand group whose first letter that needs
// a value is its last.
func (fs *cliFlags) valueNext(a string) bool {
	if name, ok := strings.CutPrefix(a, "--"); ok {
		name, _, inline := strings.Cut(name, "=")
		f := fs.Lookup(name)
		return f != nil && !inline && f.NoOptDefVal == ""
	}
	group := a[1:]
	for i := range len(group) {
		f := fs.ShorthandLookup(group[i : i+1])
		if f == nil {
			return false // an unknown letter (or '='): pflag stops there
		}
		if f.NoOptDefVal == "" {
			return i == len(group)-1
		}
	}
	return false
}

// explain rewrites an error of pflag for args (as typed, before rewrite)
// in goccl's words, naming the flag as it was typed.
func (fs *cliFlags) explain(args []string, err error) error {
	var notExist *pflag.NotExistError
	var invalid *pflag.InvalidValueError
	var needs *pflag.ValueRequiredError
	switch {
	case errors.As(err, &notExist):
		rest := notExist.GetSpecifiedShortnames() // the group from the unknown letter on
		if rest == "" {
			return fs.unknown("--" + notExist.GetSpecifiedName()) // "unknown flag: --x"
		}
		// "unknown shorthand flag: 'x' in -x...": a word that starts with
		// the letter, or is near a long flag name, is one unknown flag
		// (-evn, -N; -alll after -a); else the letter after known boolean
		// shorthands is named in its group.
		for _, a := range flagArgs(args) {
			if len(a) < 2 || a[1] == '-' || !strings.HasSuffix(a, rest) {
				continue
			}
			word, _, _ := strings.Cut(a, "=")
			if a == "-"+rest || closest(word[1:], fs.longNames()) != "" {
				return fs.unknown(word)
			}
			return fmt.Errorf("unknown flag %q in %q", "-"+rest[:1], a)
		}
		return fs.unknown("-" + rest[:1])
	case errors.As(err, &invalid):
		f, value := invalid.GetFlag(), invalid.GetValue()
		// -npp or -nosuch: pflag read a shorthand (-n) with the rest of
		// the word as its value, and the value is wrong. When the word is
		// near a long flag name, it was meant as one; else the error shows
		// the word.
		typed := ""
		if f.Shorthand != "" && value != "" && unicode.IsLetter(rune(value[0])) {
			for _, a := range flagArgs(args) {
				if a == "-"+f.Shorthand+value {
					typed = a
					word, _, _ := strings.Cut(a, "=")
					if closest(word[1:], fs.longNames()) != "" {
						return fs.unknown(word)
					}
					break
				}
			}
		}
		cause := errors.Unwrap(err)
		var num *strconv.NumError
		if errors.As(cause, &num) {
			cause = num.Err // "invalid syntax", not strconv.ParseInt: parsing "x": invalid syntax
		}
		if typed != "" {
			return fmt.Errorf("invalid value %q for flag %s in %q: %v", value, "-"+f.Shorthand, typed, cause)
		}
		return fmt.Errorf("invalid value %q for flag %s: %v", value, fs.spelling(args, f, value), cause)
	case errors.As(err, &needs):
		name := needs.GetSpecifiedName()
		if needs.GetSpecifiedShortnames() != "" || flagIndex(args, "-"+name) >= 0 {
			return fmt.Errorf("flag needs an argument: -%s", name)
		}
		return fmt.Errorf("flag needs an argument: --%s", name)
	}
	return err
}

// unknown is the error for the unknown flag typed ("--minbyte", "-N"):
// `unknown flag "--minbyte"; did you mean "--minbytes"?`.
func (fs *cliFlags) unknown(typed string) error {
	name := strings.TrimLeft(typed, "-")
	dashes := typed[:len(typed)-len(name)]
	var candidates []string
	fs.VisitAll(func(f *pflag.Flag) {
		candidates = append(candidates, f.Name)
		if f.Shorthand != "" {
			candidates = append(candidates, f.Shorthand)
		}
	})
	c := closest(name, append(candidates, "help"))
	if c == "" {
		return fmt.Errorf("unknown flag %q", typed)
	}
	if len(c) == 1 && fs.Lookup(c) == nil {
		dashes = "-" // a shorthand only: -N for -n
	}
	return fmt.Errorf("unknown flag %q; did you mean %q?", typed, dashes+c)
}

// longNames are the long flag names and "help".
func (fs *cliFlags) longNames() []string {
	names := []string{"help"}
	fs.VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	return names
}

// spelling is how args gave the flag f the value: "-n", "--timeout",
// "-grace" (one dash, as typed), or else "--NAME".
func (fs *cliFlags) spelling(args []string, f *pflag.Flag, value string) string {
	flags := flagArgs(args)
	for i, a := range flags {
		next := ""
		if i+1 < len(args) {
			next = args[i+1]
		}
		body := strings.TrimPrefix(a[1:], "-")
		dashes := a[:len(a)-len(body)]
		name, v, inline := strings.Cut(body, "=")
		if name == f.Name && (inline && v == value || !inline && next == value) {
			return dashes + name
		}
		if c := f.Shorthand; c != "" && dashes == "-" &&
			(strings.HasSuffix(a, c+value) || strings.HasSuffix(a, c+"="+value) || strings.HasSuffix(a, c) && next == value) {
			return "-" + c
		}
	}
	return "--" + f.Name
}

// flagArgs is args up to "--", with the arguments that are not flags
// blanked (to keep the indexes of args).
func flagArgs(args []string) []string {
	var out []string
	for _, a := range args {
		if a == "--" {
			break
		}
		if len(a) < 2 || a[0] != '-' {
			a = "-"
		}
		out = append(out, a)
	}
	return out
}

// flagIndex is the index of the flag argument typed in args, -1 if none.
func flagIndex(args []string, typed string) int {
	for i, a := range flagArgs(args) {
		if a == typed {
			return i
		}
	}
	return -1
}
