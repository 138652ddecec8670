package seatbelt

import (
	"strconv"
)

// ShimArg is the first argument that turns the driver binary into the
// RLIMIT_AS shim. Go's os/exec has no hook between fork and exec, and
// setting the limit in the driver itself would cap the driver and every
// concurrent command; so the driver re-executes itself with this argument,
// the shim lowers RLIMIT_AS and execs sandbox-exec, which execs the
// command: the limit is inherited across both execs and the process id
// (and so the process group) never changes.
const ShimArg = "__aleph-seatbelt-rlimit-shim"

// shimStatusFD is the descriptor on which the shim reports a setup
// failure. It is close-on-exec in the shim, so a successful exec closes it
// with nothing written.
const shimStatusFD = 3

// ShimArgv prefixes argv with the shim invocation for a limit of asBytes.
func ShimArgv(shim []string, asBytes uint64, argv []string) []string {
	out := append([]string{}, shim...)
	out = append(out, "--as-bytes", strconv.FormatUint(asBytes, 10), "--")
	return append(out, argv...)
}

// parseShimArgs reads `--as-bytes N -- PROGRAM ARG...` (the part after
// ShimArg).
func parseShimArgs(args []string) (asBytes uint64, argv []string, err error) {
	if len(args) < 4 || args[0] != "--as-bytes" || args[2] != "--" {
		return 0, nil, errShimUsage
	}
	n, perr := strconv.ParseUint(args[1], 10, 64)
	if perr != nil || n == 0 {
		return 0, nil, errShimUsage
	}
	if len(args[3]) == 0 || args[3][0] != '/' {
		return 0, nil, errShimUsage
	}
	return n, args[3:], nil
}

type shimError string

func (e shimError) Error() string { return string(e) }

const errShimUsage = shimError("usage: " + ShimArg + " --as-bytes N -- /ABSOLUTE/PROGRAM [ARG...]")
