//go:build !unix

package gitimport

import "os"

// Layered workspaces are Linux-only: there is no upper layer to read here.

type upperDir struct{ path string }

func openUpperRoot(path string) (*upperDir, entKind, error) { return nil, kindAbsent, errUnsupported }
func (d *upperDir) Close()                                  {}
func (d *upperDir) kind(string) entKind                     { return kindAbsent }
func (d *upperDir) sub(string) (*upperDir, entKind)         { return nil, kindAbsent }
func (d *upperDir) names(int) ([]string, error)             { return nil, errUnsupported }
func (d *upperDir) opaque() bool                            { return false }
func (d *upperDir) read(string, int64) ([]byte, entKind, error) {
	return nil, kindAbsent, errUnsupported
}
func (d *upperDir) openFile(string) (*os.File, int64, entKind, error) {
	return nil, 0, kindAbsent, errUnsupported
}

const upperSupported = false
