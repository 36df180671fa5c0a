// Command hello is a tiny rank program for the launch tests.
package main

import (
	"fmt"
	"os"
)

func main() {
	exe, _ := os.Executable()
	fmt.Printf("hello from rank %s of %s\n", os.Getenv("GOCCL_RANK"), os.Getenv("GOCCL_WORLD_SIZE"))
	fmt.Printf("exe %s\n", exe)
}
