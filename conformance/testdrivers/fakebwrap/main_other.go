//go:build !linux

// Command fakebwrap stands in for bubblewrap in the suite's own tests; it
// exists only on Linux.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "fakebwrap: Linux only")
	os.Exit(2)
}
