//go:build linux

package bwrap

import "io"

// Main runs the hidden modes of the driver binary other than sandbox-init
// (which initmain serves): the network supervisor and the session network
// holder the driver starts, the placeholder janitor, and the raw bwrap runs
// the benchmarks start. args are the binary's arguments without its name;
// ok is false when args[0] names none of these modes, and the binary then
// goes on to serve the driver. The modes are one entry point so that the
// package exports no function per mode.
func Main(args []string, stdin io.Reader, stdout io.Writer) (code int, ok bool) {
	if len(args) == 0 {
		return 0, false
	}
	switch args[0] {
	case netSupervisorCommand:
		return netSupervisorMain(args[1:]), true
	case netnsHolderCommand:
		return netnsHolderMain(args[1:]), true
	case janitorCommand:
		return janitorMain(args[1:]), true
	case rawRunsCommand:
		return rawRunsMain(args[1:], stdin, stdout), true
	}
	return 0, false
}
