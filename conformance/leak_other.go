//go:build !linux

package conformance

import "errors"

type procStats struct {
	fds         int
	descendants []int
}

// Measuring another process's descriptors and children needs /proc.
const leakMeasurable = false

var errNoProc = errors.New("needs /proc (Linux)")

func measureProc(int) (procStats, error) { return procStats{}, errNoProc }

func processAlive(int) (alive, known bool) { return false, false }

// killTagged cannot find processes without /proc; the tree scripts end
// themselves after treeLifetime instead.
func killTagged(string) int { return 0 }

func memKB(int, string) (int64, error) { return 0, errNoProc }
