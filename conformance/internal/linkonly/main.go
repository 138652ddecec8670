// Command linkonly links the conformance package and does nothing else:
// the package's tests start it with the probe's magic first argument to
// show that linking the package does not make a program the probe (only
// conformance.ServeProbe, called by the program, does).
package main

import (
	"fmt"
	"os"

	_ "github.com/aleph-sandbox/aleph-sandbox/conformance"
)

func main() {
	fmt.Printf("linkonly main ran with %d arguments\n", len(os.Args)-1)
}
