//go:build !linux

// Command aleph-sandbox-init is the in-sandbox half of the Linux driver; on
// other systems it only refuses.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "aleph-sandbox-init: runs only on linux")
	os.Exit(125)
}
