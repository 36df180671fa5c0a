// Command gen writes docs/environment.md from internal/config's
// declarations: go generate ./internal/config.
package main

import (
	"fmt"
	"os"

	"github.com/goccl/goccl/internal/config"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gen FILE")
		os.Exit(2)
	}
	if err := os.WriteFile(os.Args[1], []byte(config.Markdown()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
