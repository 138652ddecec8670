package main

import "context"

// runConfig is filled in by the issue that owns it; until then it refuses.
func runConfig(_ context.Context, _ []string, io stdio) int {
	return fail(io.Err, "config: not available in this build")
}
