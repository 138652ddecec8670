//go:build !linux

// Command nonamespaces is Linux only (see main_linux.go).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "nonamespaces: Linux only")
	os.Exit(2)
}
