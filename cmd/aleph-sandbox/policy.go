package main

import "context"

// runPolicy is filled in by the issue that owns it; until then it refuses.
func runPolicy(_ context.Context, _ []string, io stdio) int {
	return fail(io.Err, "policy: not available in this build")
}
