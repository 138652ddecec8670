//go:build !windows

package main

import (
	"fmt"
	"os"
	"runtime"
)

func main() {
	fmt.Fprintf(os.Stderr, "aleph-driver-appcontainer: the AppContainer driver runs only on Windows (this is %s/%s); use aleph-driver-bwrap on Linux or aleph-driver-seatbelt on macOS\n", runtime.GOOS, runtime.GOARCH)
	os.Exit(125)
}
