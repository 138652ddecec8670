package seatbelt

import "time"

// processSpec is one launch: the full argv (launcher or shim first), the
// exact environment, and the limits Run enforces itself.
type processSpec struct {
	argv     []string
	env      []string
	dir      string
	stdin    []byte
	timeout  time.Duration
	budget   int64
	withShim bool
}

// exitFromStatus maps a wait status to the contract's Exit fields: a
// death by signal N is exit code 128+N with Signal N, as a shell reports it.
func exitFromStatus(code int, signaled bool, sig int) (exitCode, signal int32) {
	if signaled {
		return int32(128 + sig), int32(sig)
	}
	return int32(code), 0
}

// maxRSSKB converts ru_maxrss to KiB: macOS reports bytes, Linux KiB.
func maxRSSKB(goos string, maxrss int64) int64 {
	if goos == "darwin" {
		return maxrss / 1024
	}
	return maxrss
}
