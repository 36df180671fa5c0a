package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version may be set at link time: -ldflags "-X main.version=v1.2.3".
var version = ""

func init() {
	register(&command{
		name:    "version",
		summary: "print the goccl version",
		usage:   "goccl version",
		run:     runVersion,
	})
}

// versionString is "goccl VERSION[ (REVISION[, modified])] GOVERSION OS/ARCH".
func versionString() string {
	v := version
	var rev string
	var dirty bool
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if dirty {
			rev += ", modified"
		}
		v += " (" + rev + ")"
	}
	return fmt.Sprintf("goccl %s %s %s/%s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func runVersion(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
			fmt.Fprintln(stdout, "usage: goccl version\n\nPrints the goccl version, the Go version and the platform.")
			return 0
		}
		fmt.Fprintf(stderr, "usage: goccl version\n")
		return 2
	}
	fmt.Fprintln(stdout, versionString())
	return 0
}
