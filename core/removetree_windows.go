//go:build windows

package core

import "os"

// removeTree is os.RemoveAll, which on Windows also removes read-only
// files and never follows a link or junction below dir.
func removeTree(dir string) error { return os.RemoveAll(dir) }
