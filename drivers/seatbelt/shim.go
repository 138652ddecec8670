package seatbelt

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
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

// shimEnvFD is the descriptor from which the shim reads the command's
// environment. The shim is this driver's own binary, unsigned and outside
// Seatbelt: started with the command's environment, dyld would honour a
// DYLD_INSERT_LIBRARIES pointing into the workspace and run workspace code
// unsandboxed. So the shim starts with an empty environment and gets the
// command's over this pipe, and passes it only to sandbox-exec, a platform
// binary for which the system strips DYLD_* variables.
const shimEnvFD = 4

// maxShimEnv bounds what the shim reads from the environment pipe: more
// than ARG_MAX (1 MiB on macOS), which bounds what exec can take anyway.
const maxShimEnv = 4 << 20

// encodeEnv writes env as NUL-terminated NAME=VALUE entries (no entry can
// contain a NUL: ValidateRunSpec refuses them).
func encodeEnv(env []string) []byte {
	var b bytes.Buffer
	for _, e := range env {
		b.WriteString(e)
		b.WriteByte(0)
	}
	return b.Bytes()
}

// decodeEnv reads what encodeEnv wrote, refusing a truncated or malformed
// block rather than running with part of an environment.
func decodeEnv(data []byte) ([]string, error) {
	if len(data) == 0 {
		return []string{}, nil
	}
	if data[len(data)-1] != 0 {
		return nil, shimError("environment block is not NUL-terminated (truncated?)")
	}
	out := []string{}
	for _, e := range strings.Split(string(data[:len(data)-1]), "\x00") {
		if i := strings.IndexByte(e, '='); i <= 0 {
			return nil, shimError("environment entry without NAME=")
		}
		out = append(out, e)
	}
	return out, nil
}

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

// probeArg, after ShimArg, runs the allocation probe instead of a
// command: `ShimArg probeArg N`.
const probeArg = "--probe-allocation"

// ProbeArgv is the shim invocation that checks RLIMIT_AS of limit bytes
// is enforced on this host.
func ProbeArgv(shim []string, limit uint64) []string {
	return append(append([]string{}, shim...), probeArg, strconv.FormatUint(limit, 10))
}

// allocationProbe checks that RLIMIT_AS really bounds allocation here:
// that setrlimit succeeds is not enough (an OS may accept the limit and
// not enforce it). A mapping of twice the limit must succeed before the
// limit is set (the control: the probe itself can map that much) and fail
// after. alloc maps and unmaps size bytes; setLimit lowers the soft limit.
func allocationProbe(limit uint64, alloc func(size uint64) error, setLimit func(limit uint64) error) error {
	over := 2 * limit
	if err := alloc(over); err != nil {
		return fmt.Errorf("control: mapping %d bytes with no limit failed, so the probe proves nothing: %w", over, err)
	}
	if err := setLimit(limit); err != nil {
		return fmt.Errorf("setrlimit(RLIMIT_AS, %d): %w", limit, err)
	}
	if err := alloc(over); err == nil {
		return fmt.Errorf("a %d byte mapping succeeded under a %d byte RLIMIT_AS: the limit is not enforced", over, limit)
	}
	return nil
}
