//go:build !linux

// Command aleph-driver-bwrap is the Linux sandbox driver plugin; on other
// systems it only says so.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "aleph-driver-bwrap: this driver runs only on linux")
	os.Exit(125)
}
