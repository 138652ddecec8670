//go:build !linux

package core

import "context"

// gitScanSupported: the scan is written for Linux only so far (it reads
// directories with getdents64 and compares Linux ctimes).
const gitScanSupported = false

func markGitScan(string) gitMark { return gitMark{} }

func scanGitShapes(context.Context, string, gitMark, []string, gitScanLimits) *GitQuarantine {
	return &GitQuarantine{Incomplete: "not available on this system"}
}

func scanGitDirs(context.Context, string, gitMark, []string, []string) *GitQuarantine {
	return &GitQuarantine{Incomplete: "not available on this system"}
}
