//go:build !unix

package inputfile

import "testing"

func mkfifo(t *testing.T, _ string) string {
	t.Skip("no FIFOs here")
	return ""
}
