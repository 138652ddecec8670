//go:build !darwin

package main

import (
	"fmt"
	"os"
	"runtime"
)

func main() {
	fmt.Fprintf(os.Stderr, "aleph-driver-seatbelt: the Seatbelt driver runs only on macOS (this is %s/%s); use aleph-driver-bwrap on Linux or aleph-driver-appcontainer on Windows\n", runtime.GOOS, runtime.GOARCH)
	os.Exit(125)
}
