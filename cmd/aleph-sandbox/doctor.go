package main

import "context"

// runDoctor is filled in by the issue that owns it; until then it refuses.
func runDoctor(_ context.Context, _ []string, io stdio) int {
	return fail(io.Err, "doctor: not available in this build")
}
