//go:build !linux

// Command nolandlock is Linux only (see main_linux.go).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "nolandlock: Linux only")
	os.Exit(2)
}
