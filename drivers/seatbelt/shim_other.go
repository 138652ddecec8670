//go:build !unix

package seatbelt

import (
	"fmt"
	"os"
)

// ShimMain exists on every OS so the command builds; the shim only works
// on Unix.
func ShimMain(args []string) int {
	fmt.Fprintln(os.Stderr, "seatbelt shim: only available on macOS")
	return 125
}
