package main

import "context"

// runConformance is filled in by the issue that owns it; until then it refuses.
func runConformance(_ context.Context, _ []string, io stdio) int {
	return fail(io.Err, "conformance: not available in this build")
}
