package main

import "context"

// runDrivers is filled in by the issue that owns it; until then it refuses.
func runDrivers(_ context.Context, _ []string, io stdio) int {
	return fail(io.Err, "drivers: not available in this build")
}
